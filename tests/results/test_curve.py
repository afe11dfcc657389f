"""Reading one method's set for n from a prune_curve.json (what `prune --from` exports), in both schemas."""

from __future__ import annotations

import json

import pytest
from factories import curve_dict, curve_sets_dict

from layerprobe.core import ResultError
from layerprobe.results import read_curve_set

SETS = {
    "greedy": {1: {"blocks": [4], "sublayers": []}, 2: {"blocks": [4, 1], "sublayers": []}},
    "blockpruner": {3: {"blocks": [2], "sublayers": [[3, "attention"], [5, "mlp"]]}},
    "influence": {3: {"blocks": [5, 0, 2]}},  # no sublayers field at all
}


def _write(tmp_path, data):
    path = tmp_path / "prune_curve.json"
    path.write_text(json.dumps(data))
    return path


def test_a_set_of_schema_2(tmp_path):
    path = _write(tmp_path, curve_sets_dict(SETS, num_layers=6))
    chosen = read_curve_set(path, "greedy", 2)
    assert (chosen.blocks, chosen.sublayers, chosen.num_layers, chosen.model_id) == ([1, 4], [], 6, "org/m")
    assert read_curve_set(path, "influence", 3).blocks == [0, 2, 5]
    mixed = read_curve_set(path, "blockpruner", 3)
    assert mixed.blocks == [2] and mixed.sublayers == [(3, "attention"), (5, "mlp")]


def test_a_span_of_schema_1(tmp_path):
    path = _write(tmp_path, curve_dict())  # 4 blocks; angular chose start 2 for n = 1 and start 1 for n = 2
    assert read_curve_set(path, "angular", 2).blocks == [1, 2]
    assert read_curve_set(path, "angular", 1).blocks == [2]
    assert read_curve_set(path, "last", 1).sublayers == [] and read_curve_set(path, "last", 1).num_layers == 4


@pytest.mark.parametrize(
    ("method", "n", "message"),
    [
        ("sleb", 1, "has no method 'sleb'; it has: greedy, blockpruner, influence."),
        ("greedy", 3, "has no greedy set for n = 3; it has: n = 1, 2."),
    ],
)
def test_a_missing_method_or_n_lists_what_there_is(tmp_path, method, n, message):
    path = _write(tmp_path, curve_sets_dict(SETS))
    with pytest.raises(ResultError, match=message.replace("(", r"\(").replace(")", r"\)")):
        read_curve_set(path, method, n)


def test_a_missing_n_in_schema_1_lists_what_there_is(tmp_path):
    with pytest.raises(ResultError, match=r"has no angular set for n = 3; it has: n = 1, 2\."):
        read_curve_set(_write(tmp_path, curve_dict()), "angular", 3)


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"blocks": [6]}, "blocks in 0 … 5"),
        ({"blocks": [-1]}, "blocks"),
        ({"blocks": "1,2"}, "an array"),
        ({"blocks": [], "sublayers": [[1, "ffn"]]}, '"attention" or "mlp"'),
        ({"blocks": [], "sublayers": [[1]]}, "a pair"),
    ],
)
def test_a_bad_set_is_one_line_naming_the_field(tmp_path, bad, message):
    path = _write(tmp_path, curve_sets_dict({"greedy": {1: bad}}))
    with pytest.raises(ResultError, match=message) as raised:
        read_curve_set(path, "greedy", 1)
    assert "methods.greedy.sets.1" in str(raised.value).splitlines()[0]


def test_not_a_prune_curve(tmp_path):
    data = curve_sets_dict(SETS)
    data["schema"] = "layerprobe/angular@1"
    with pytest.raises(ResultError, match="expected a prune-curve result"):
        read_curve_set(_write(tmp_path, data), "greedy", 1)


@pytest.mark.parametrize(
    ("blocks", "n", "got"),
    [([1, 1], 2, "got 2: 1, 1"), ([1], 2, "got 1: 1"), ([1, 2, 3], 2, "got 3: 1, 2, 3")],
)
def test_a_set_that_is_not_n_distinct_units_is_refused(tmp_path, blocks, n, got):
    """A hand-edited set (`[1, 1]` for n = 2) would export something other than it says: refused."""
    path = _write(tmp_path, curve_sets_dict({"greedy": {n: {"blocks": blocks, "sublayers": []}}}, num_layers=9))
    with pytest.raises(ResultError) as caught:
        read_curve_set(path, "greedy", n)
    assert (
        caught.value.message
        == f"{path}: methods.greedy.sets.{n} must be {n} distinct units (the set for n = {n}), {got}"
    )
