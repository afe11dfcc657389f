import pytest

from layerprobe.core import ModelSpec, PruneSpec, parse_layer_ranges
from layerprobe.core.errors import LayerprobeError


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (None, [0, 1, 2, 3, 4, 5, 6, 7]),
        ("all", list(range(8))),
        ("0-3,7", [0, 1, 2, 3, 7]),
        ("5", [5]),
        ("7,0", [0, 7]),
        ("2-2", [2]),
        (" 1 - 1 ".replace(" ", ""), [1]),
        ("0-1,1-2", [0, 1, 2]),
    ],
)
def test_layer_ranges_are_inclusive_and_zero_based(text, expected):
    assert parse_layer_ranges(text, 8) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("8", "out of range"),
        ("0-8", "out of range"),
        ("3-1", "runs backwards"),
        ("a", "Cannot read"),
        ("1,,2", "Cannot read"),
        ("-1", "Cannot read"),
        ("1.5", "Cannot read"),
    ],
)
def test_bad_layer_ranges(text, message):
    with pytest.raises(LayerprobeError, match=message):
        parse_layer_ranges(text, 8)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"tasks": ()}, "No --task"),
        ({"tasks": ("a", "a")}, "named twice"),
        ({"engine": "fast"}, "Unknown --engine"),
        ({"limit": 0}, "--limit"),
        ({"num_fewshot": -1}, "--num-fewshot"),
        ({"batch_size": 0}, "--batch-size"),
        ({"batch_size": "max"}, "--batch-size"),
    ],
)
def test_prune_spec_validation(kwargs, message):
    args = {"model": ModelSpec("m"), "tasks": ("arc_easy",), **kwargs}
    with pytest.raises(LayerprobeError, match=message):
        PruneSpec(**args)


def test_model_spec_validation():
    with pytest.raises(LayerprobeError, match="--device-map"):
        ModelSpec("m", device_map="balanced")
    assert ModelSpec("m", device="cuda:1").device == "cuda:1"


def test_corpus_spec_decides_c4s_config_for_library_callers_too():
    from layerprobe.core import DEFAULT_DATASET, CorpusSpec

    assert CorpusSpec().dataset_config == "en"
    assert CorpusSpec(dataset=DEFAULT_DATASET, dataset_config=None).dataset_config == "en"
    assert CorpusSpec(dataset=DEFAULT_DATASET, dataset_config="realnewslike").dataset_config == "realnewslike"
    assert CorpusSpec(dataset="wikitext").dataset_config is None  # no C4 config leaks onto other datasets


def test_hub_or_local_is_decided_once(tmp_path):
    from layerprobe.core import BUILTIN_CORPUS, CorpusSpec

    present = tmp_path / "notes"  # a file without a corpus suffix is still local
    present.write_text("text")
    assert CorpusSpec(dataset=str(present)).is_local and not CorpusSpec(dataset=str(present)).is_hub
    missing = CorpusSpec(dataset=str(tmp_path / "missing.jsonl"))  # local by its suffix: reported as missing
    assert missing.is_local and not missing.is_hub
    assert not CorpusSpec(dataset=BUILTIN_CORPUS).is_hub and not CorpusSpec(dataset=BUILTIN_CORPUS).is_local
    assert CorpusSpec(dataset="allenai/c4").is_hub
