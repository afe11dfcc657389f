import json

import pytest
import transformers as tf

from layerprobe.core import BUILTIN_CORPUS, CorpusSpec
from layerprobe.core.errors import CorpusError, EmptyCorpus
from layerprobe.data import batches, build_windows, iter_documents
from layerprobe.data.windows import plan_window_lengths, special_layout


@pytest.mark.parametrize(
    ("tokens", "seq_len", "specials"),
    [(1000, 128, 0), (1024, 128, 1), (129, 128, 2), (130, 128, 2), (5, 128, 2), (3, 4, 2)],
)
def test_window_plan_adds_up_exactly(tokens, seq_len, specials):
    lengths = plan_window_lengths(tokens, seq_len, specials)
    assert sum(lengths) == tokens
    assert all(specials + 1 <= n <= seq_len for n in lengths)


def test_window_plan_rejects_impossible_budgets():
    with pytest.raises(CorpusError):
        plan_window_lengths(2, 128, 2)
    with pytest.raises(CorpusError):
        plan_window_lengths(100, 2, 2)


def test_special_layouts(tiny_checkpoints, minilm):
    llama = tf.AutoTokenizer.from_pretrained(tiny_checkpoints["llama"])
    gpt2 = tf.AutoTokenizer.from_pretrained(tiny_checkpoints["gpt2"])
    bert = tf.AutoTokenizer.from_pretrained(minilm)
    assert special_layout(llama).prefix == [llama.bos_token_id] and special_layout(llama).suffix == []
    assert special_layout(gpt2).prefix == [] and special_layout(gpt2).separator == [gpt2.eos_token_id]
    layout = special_layout(bert)
    assert (layout.prefix, layout.suffix) == ([bert.cls_token_id], [bert.sep_token_id])


def test_windows_pack_documents_in_order_with_separators(tiny_checkpoints, pydoc_texts):
    tok = tf.AutoTokenizer.from_pretrained(tiny_checkpoints["llama"])
    windows = build_windows(tok, pydoc_texts, 1000, 100)
    assert sum(len(w.input_ids) for w in windows) == 1000
    assert all(w.input_ids[0] == tok.bos_token_id for w in windows)
    text_stream = [t for w in windows for t in w.input_ids[1:]]
    expected = []
    for text in pydoc_texts:
        expected += tok(text, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        if len(expected) >= len(text_stream):
            break
    assert text_stream == expected[: len(text_stream)]
    assert all(w.last_text_position == len(w.input_ids) - 1 for w in windows)


def test_bert_windows_end_with_sep_and_last_position_is_text(minilm, pydoc_texts):
    tok = tf.AutoTokenizer.from_pretrained(minilm)
    windows = build_windows(tok, pydoc_texts, 700, 256)
    assert [len(w.input_ids) for w in windows] == [256, 256, 188]
    for w in windows:
        assert w.input_ids[0] == tok.cls_token_id and w.input_ids[-1] == tok.sep_token_id
        assert w.last_text_position == len(w.input_ids) - 2


def test_too_little_text_says_how_much_was_found(tiny_checkpoints):
    tok = tf.AutoTokenizer.from_pretrained(tiny_checkpoints["gpt2"])
    with pytest.raises(EmptyCorpus, match=r"holds about \d+ text tokens") as info:
        build_windows(tok, ["just a few words here"], 10_000, 128)
    assert "Lower --tokens" in info.value.hint


def test_batches_never_mix_lengths(tiny_checkpoints, pydoc_texts):
    tok = tf.AutoTokenizer.from_pretrained(tiny_checkpoints["gpt2"])
    windows = build_windows(tok, pydoc_texts, 1050, 100)
    groups = list(batches(windows, 4))
    assert [len(g) for g in groups] == [4, 4, 2, 1]
    assert all(len({len(w.input_ids) for w in g}) == 1 for g in groups)


def _write_corpora(directory, texts):
    txt = directory / "corpus.txt"
    txt.write_text("\n\n".join(texts), encoding="utf-8")
    jsonl = directory / "corpus.jsonl"
    jsonl.write_text("\n".join(json.dumps({"body": t, "id": i}) for i, t in enumerate(texts)), encoding="utf-8")
    import pyarrow as pa
    import pyarrow.parquet as pq

    parquet = directory / "corpus.parquet"
    pq.write_table(pa.table({"body": texts}), parquet)
    return txt, jsonl, parquet


def test_local_files_stream_the_same_documents(tmp_path):
    texts = ["First paragraph of text.", "Second one, a little longer than the first.", "Third."]
    txt, jsonl, parquet = _write_corpora(tmp_path, texts)
    assert list(iter_documents(CorpusSpec(str(txt)))) == texts
    assert list(iter_documents(CorpusSpec(str(jsonl), text_field="body"))) == texts
    assert list(iter_documents(CorpusSpec(str(parquet), text_field="body"))) == texts


def test_local_file_errors(tmp_path):
    _, jsonl, _ = _write_corpora(tmp_path, ["a", "b"])
    with pytest.raises(CorpusError, match="no field 'text'.*body"):
        list(iter_documents(CorpusSpec(str(jsonl))))
    with pytest.raises(CorpusError, match="No corpus file"):
        list(iter_documents(CorpusSpec(str(tmp_path / "missing.jsonl"))))
    odd = tmp_path / "corpus.xml"
    odd.write_text("<a/>")
    with pytest.raises(CorpusError, match="unknown file type"):
        list(iter_documents(CorpusSpec(str(odd))))


def test_unreachable_hub_dataset_is_a_clear_error():
    with pytest.raises(CorpusError, match="Cannot open corpus") as info:
        next(iter_documents(CorpusSpec("allenai/c4", "en", "validation")))
    assert "local" in info.value.hint


def test_builtin_corpus_is_real_english():
    docs = list(iter_documents(CorpusSpec(BUILTIN_CORPUS)))
    assert len(docs) > 50 and sum(len(d) for d in docs) > 400_000
