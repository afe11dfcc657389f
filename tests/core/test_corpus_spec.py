"""What to read: C4's config decided for library callers too, hub or local decided once."""

from __future__ import annotations

import pytest

from layerprobe.core import BUILTIN_CORPUS, DEFAULT_DATASET, TEXTS_CORPUS, CorpusSpec, LayerprobeError


def test_corpus_spec_decides_c4s_config_for_library_callers_too():
    assert CorpusSpec().dataset_config == "en"
    assert CorpusSpec(dataset=DEFAULT_DATASET, dataset_config=None).dataset_config == "en"
    assert CorpusSpec(dataset=DEFAULT_DATASET, dataset_config="realnewslike").dataset_config == "realnewslike"
    assert CorpusSpec(dataset="wikitext").dataset_config is None  # no C4 config leaks onto other datasets


def test_hub_or_local_is_decided_once(tmp_path):
    present = tmp_path / "notes"  # a file without a corpus suffix is still local
    present.write_text("text")
    assert CorpusSpec(dataset=str(present)).is_local and not CorpusSpec(dataset=str(present)).is_hub
    missing = CorpusSpec(dataset=str(tmp_path / "missing.jsonl"))  # local by its suffix: reported as missing
    assert missing.is_local and not missing.is_hub
    assert not CorpusSpec(dataset=BUILTIN_CORPUS).is_hub and not CorpusSpec(dataset=BUILTIN_CORPUS).is_local
    assert CorpusSpec(dataset="allenai/c4").is_hub


def test_a_list_of_strings_is_a_corpus_recorded_as_texts():
    spec = CorpusSpec(texts=("one", "two"))
    assert spec.dataset == TEXTS_CORPUS and not spec.is_hub and not spec.is_local
    with pytest.raises(LayerprobeError, match="non-empty list of strings"):
        CorpusSpec(texts=("one", 2))
