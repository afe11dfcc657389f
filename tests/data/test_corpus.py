"""Corpora: local .txt, .jsonl and .parquet files stream the same documents; errors name what is wrong."""

from __future__ import annotations

import pytest
from factories import write_corpora

from layerprobe.core import BUILTIN_CORPUS, CorpusSpec
from layerprobe.core.errors import CorpusError
from layerprobe.data import iter_documents


def test_local_files_stream_the_same_documents(tmp_path):
    texts = ["First paragraph of text.", "Second one, a little longer than the first.", "Third."]
    txt, jsonl, parquet = write_corpora(tmp_path, texts)
    assert list(iter_documents(CorpusSpec(str(txt)))) == texts
    assert list(iter_documents(CorpusSpec(str(jsonl), text_field="body"))) == texts
    assert list(iter_documents(CorpusSpec(str(parquet), text_field="body"))) == texts


def test_local_file_errors(tmp_path):
    _, jsonl, _ = write_corpora(tmp_path, ["a", "b"])
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


def test_a_corpus_of_texts_yields_them_in_order():
    from layerprobe.core import CorpusSpec
    from layerprobe.data import iter_documents

    assert list(iter_documents(CorpusSpec(texts=("one", "two")))) == ["one", "two"]
