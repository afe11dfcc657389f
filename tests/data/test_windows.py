"""Token windows: the plan adds up to --tokens exactly, documents are packed in order with the model's
special tokens, and one huge line is tokenized in bounded pieces with the same tokens."""

from __future__ import annotations

import random
import time

import pytest
import transformers as tf

from layerprobe.core import CorpusSpec
from layerprobe.core.errors import CorpusError, EmptyCorpus
from layerprobe.data import batches, build_windows, iter_documents
from layerprobe.data.windows import PIECE_CHARS, piece_rule, plan_window_lengths, special_layout, split_long


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


def test_split_long_pieces_join_back_and_stay_bounded():
    rng = random.Random(0)
    text = "".join(rng.choice(["word", "x" * 50, "a."]) + rng.choice([" ", "  ", "\n", " \t "]) for _ in range(9_000))
    pieces = list(split_long(text, 256, keep_space=True))
    assert "".join(pieces) == text
    assert all(len(p) <= 256 for p in pieces) and len(pieces) > len(text) // 256
    assert all(p[0].isspace() and not p[1].isspace() for p in pieces[1:] if len(p) > 1)
    dropped = list(split_long(text, 256, keep_space=False))
    assert sum(map(len, dropped)) == len(text) - (len(dropped) - 1)  # one whitespace character per cut
    assert [len(p) for p in split_long("z" * 1000, 256)] == [256, 256, 256, 232]  # no whitespace: hard cuts


class CountingTokenizer:
    """Wraps a tokenizer and counts the characters it was asked to encode."""

    def __init__(self, inner) -> None:
        self.inner, self.chars = inner, 0

    def __call__(self, texts, **kw):
        self.chars += len(texts) if isinstance(texts, str) else sum(map(len, texts))
        return self.inner(texts, **kw)

    def __getattr__(self, name):
        return getattr(self.inner, name)


@pytest.mark.parametrize("which", ["gpt2", "bert"])
def test_one_huge_line_is_tokenized_in_bounded_pieces_with_the_same_tokens(tmp_path, tiny_checkpoints, minilm, which):
    tok = tf.AutoTokenizer.from_pretrained(tiny_checkpoints["gpt2"] if which == "gpt2" else minilm)
    assert piece_rule(tok) is True  # byte-level BPE and WordPiece: whitespace starts the next piece
    rng = random.Random(1)
    vocab = ["the", "layer", "probe", "angular", "distance,", "block.", "x^l", "42", "(a)", "naïve"]
    text = " ".join(rng.choice(vocab) for _ in range(900_000))  # one ~6 MB line, no newline
    path = tmp_path / "huge.txt"
    path.write_text(text, encoding="utf-8")
    assert path.stat().st_size > 5_000_000
    counting = CountingTokenizer(tok)
    start = time.perf_counter()
    windows = build_windows(counting, iter_documents(CorpusSpec(str(path))), 1024, 128)
    elapsed = time.perf_counter() - start
    assert sum(len(w.input_ids) for w in windows) == 1024
    assert counting.chars < 20 * PIECE_CHARS  # follows --tokens, not the 6 MB file
    head, tail = (0, 0) if which == "gpt2" else (1, 1)  # BERT windows are [CLS] … [SEP]
    text_ids = [t for w in windows for t in w.input_ids[head : len(w.input_ids) - tail]]
    whole = tok(text[:60_000], add_special_tokens=False)["input_ids"]  # independent: one call, no pieces
    assert len(text_ids) > 900
    assert text_ids == whole[: len(text_ids)]
    assert elapsed < 20  # generous for a shared 2-core machine; the whole file took minutes before
