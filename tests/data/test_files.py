"""Local corpus files: bad files are one clear error naming the file (and line); long documents are tokenized
in bounded pieces whose tokens equal those of the whole text."""

from __future__ import annotations

import json
import random
import time

import pytest
import transformers as tf
from typer.testing import CliRunner

from layerprobe.cli.app import app
from layerprobe.core import CorpusSpec
from layerprobe.core.errors import CorpusError
from layerprobe.data import build_windows, iter_documents
from layerprobe.data.windows import PIECE_CHARS, piece_rule, split_long


def docs(path, **kw) -> list[str]:
    return list(iter_documents(CorpusSpec(str(path), **kw)))


@pytest.mark.parametrize("bad_line", [1, 3])
def test_jsonl_with_an_invalid_line_names_the_line(tmp_path, bad_line):
    lines = [json.dumps({"text": f"document {i}"}) for i in range(4)]
    lines[bad_line - 1] = '{"text": "unterminated'
    path = tmp_path / "corpus.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(CorpusError, match=rf"corpus\.jsonl, line {bad_line}: not valid JSON"):
        docs(path)


def test_jsonl_line_that_is_not_an_object_is_named(tmp_path):
    path = tmp_path / "corpus.jsonl"
    path.write_text('{"text": "fine"}\n\n[1, 2]\n')
    with pytest.raises(CorpusError, match=r"line 3: expected a JSON object, got list"):
        docs(path)


def test_binary_file_named_txt_is_refused(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_bytes(b"looks like text at first\n" + bytes(range(256)) * 4)
    with pytest.raises(CorpusError, match=r"corpus\.txt is not a text file: it holds a NUL byte"):
        docs(path)
    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes("line one\nline two\ncaf\xe9\n".encode("latin-1"))
    with pytest.raises(CorpusError, match=r"latin1\.txt is not UTF-8 text: undecodable bytes on line 3"):
        docs(latin1)


def test_bad_corpus_is_one_red_line_and_exit_2_from_the_cli(tmp_path, tiny_checkpoints):
    path = tmp_path / "corpus.jsonl"
    path.write_text('{"text": "ok"}\nnot json\n')
    args = ["angular", str(tiny_checkpoints["gpt2"]), "--dataset", str(path), "--tokens", "64", "--quiet"]
    result = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    assert "line 2: not valid JSON" in result.stderr and "Traceback" not in result.output


def test_paragraphs_equal_the_datasets_text_builder(tmp_path):
    import datasets

    rng = random.Random(3)
    words = ["alpha", "beta", "gamma", "é", "\n", "\n\n", "\r\n", "\n\n\n", "  "]
    path = tmp_path / "corpus.txt"
    path.write_bytes(" ".join(rng.choice(words) for _ in range(3000)).encode())
    reference = datasets.load_dataset(
        "text", data_files=str(path), split="train", streaming=True, sample_by="paragraph"
    )
    expected = [row["text"] for row in reference if row["text"].strip()]
    assert docs(path) == expected and len(expected) > 100


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
