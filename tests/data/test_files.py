"""Local corpus files: bad files are one clear error naming the file (and line); paragraphs are the ones
the `datasets` text builder gives."""

from __future__ import annotations

import json
import random

import pytest
from typer.testing import CliRunner

from layerprobe.cli.app import app
from layerprobe.core import CorpusSpec
from layerprobe.core.errors import CorpusError
from layerprobe.data import iter_documents


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
