"""angular.json's per-window adjacent distances: what they hold, that they reproduce the matrix, and their reading.

`adjacent_windows[w][l]` is window w's mean d(x^l, x^(l+1)) over its positions and `window_positions[w]` its
positions; weighted by them, the windows' mean of each column is `distance[l][l+1]`. Checked on real stability_runs
(and against a direct per-window computation from captured states), for a split accumulator (the
several-ranks path), and through validation on read.
"""

import json
import math

import numpy as np
import pytest
import torch

from layerprobe.core import ResultError
from layerprobe.measure.distance import AngularAccumulator, angular_distance
from layerprobe.results import AngularResult, load_result


def read(path):
    return json.loads(path.read_text())


@pytest.mark.parametrize("run", ["pydoc", "notes", "last"])
def test_weighted_mean_of_the_windows_is_the_adjacent_distance(stability_runs, run):
    data = read(stability_runs[run])
    rows, counts = np.array(data["adjacent_windows"]), np.array(data["window_positions"])
    blocks = data["model"]["num_layers"]
    assert rows.shape == (data["data"]["windows"], blocks) and len(counts) == len(rows)
    if run == "last":
        assert set(counts) == {1}
    else:  # every window's positions, adding up to the tokens measured
        assert counts.sum() == data["data"]["tokens"] == data["data"]["positions_averaged"]
    for l in range(blocks):
        weighted = sum(int(n) * float(v) for n, v in zip(counts, rows[:, l], strict=True)) / counts.sum()
        assert weighted == pytest.approx(data["distance"][l][l + 1], rel=1e-12, abs=1e-15)
        assert weighted == pytest.approx(data["summary"]["adjacent"][l], rel=1e-12, abs=1e-15)
    assert np.isfinite(rows).all() and (rows >= 0).all() and (rows <= 1).all()


def test_rows_are_each_windows_own_mean_distance():
    """The accumulator's rows against a direct computation on states split into windows of unequal size."""
    generator = torch.Generator().manual_seed(0)
    states = [torch.randn(11, 16, generator=generator) for _ in range(4)]  # L = 3, 11 positions
    sizes = [5, 4, 2]
    accumulator = AngularAccumulator(4)
    accumulator.update(states, sizes)
    rows = accumulator.adjacent_windows()
    start = 0
    for w, size in enumerate(sizes):
        for l in range(3):
            direct = angular_distance(states[l][start : start + size], states[l + 1][start : start + size])
            assert rows[w][l] == pytest.approx(float(direct.double().mean()), abs=1e-6)
        start += size
    assert accumulator.window_positions == sizes


def test_split_accumulators_added_in_order_give_one_accumulators_rows_bit_for_bit():
    """The several-ranks path: each batch into a fresh accumulator, totals added in batch order."""
    generator = torch.Generator().manual_seed(1)
    batches = [([torch.randn(12, 8, generator=generator) for _ in range(5)], [6, 6]) for _ in range(4)]
    one = AngularAccumulator(5)
    for states, sizes in batches:
        one.update(states, sizes)
    pieces = []
    for states, sizes in batches:
        piece = AngularAccumulator(5)
        piece.update(states, sizes)
        pieces.append(piece.totals())
    joined = AngularAccumulator(5)
    for totals in pieces:
        joined.add(totals)
    assert json.dumps(joined.adjacent_windows()) == json.dumps(one.adjacent_windows())
    assert joined.window_positions == one.window_positions == [6] * 8
    assert json.dumps(joined.result()) == json.dumps(one.result())


def test_a_window_that_measured_nothing_has_nan():
    states = [torch.ones(4, 3) for _ in range(3)]
    states[1][:2] = math.nan  # the first window's x^1 is never finite
    accumulator = AngularAccumulator(3)
    accumulator.update(states, [2, 2])
    rows = accumulator.adjacent_windows()
    assert math.isnan(rows[0][0]) and math.isnan(rows[0][1])
    assert rows[1] == pytest.approx([0.0, 0.0], abs=1e-3)  # equal states: d = 0 up to arccos's rounding near 1


def test_read_back_and_older_files(stability_runs, tmp_path):
    result = load_result(stability_runs["pydoc"])
    data = read(stability_runs["pydoc"])
    assert result.adjacent_windows == data["adjacent_windows"] and result.window_positions == data["window_positions"]
    assert AngularResult.from_dict(result.to_dict()).adjacent_windows == result.adjacent_windows
    for absent in ("missing", None):  # an older file: no fields, or null
        old = dict(data)
        if absent is None:
            old["adjacent_windows"] = old["window_positions"] = None
        else:
            del old["adjacent_windows"], old["window_positions"]
        read_back = AngularResult.from_dict(old, "old.json")
        assert read_back.adjacent_windows is None and read_back.window_positions is None
        assert read_back.distance == result.distance


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.pop("window_positions"), "window_positions must be given together with adjacent_windows"),
        (lambda d: d.pop("adjacent_windows"), "adjacent_windows must be given together with window_positions"),
        (lambda d: d["adjacent_windows"][0].pop(), r"adjacent_windows\[0\] must be an array of L = 6"),
        (lambda d: d["adjacent_windows"][1].__setitem__(2, 1.5), r"adjacent_windows\[1\]\[2\] must be a number in"),
        (lambda d: d["adjacent_windows"][1].__setitem__(2, "x"), r"adjacent_windows\[1\]\[2\] must be a number"),
        (lambda d: d["window_positions"].pop(), "window_positions must be an array of 16 counts"),
        (lambda d: d["window_positions"].__setitem__(0, 0), r"window_positions\[0\] must be an integer ≥ 1"),
        (lambda d: d["window_positions"].__setitem__(0, 2.5), r"window_positions\[0\] must be an integer"),
        (
            lambda d: (d["adjacent_windows"].pop(), d["window_positions"].pop()),
            r"adjacent_windows must be one row per window \(data.windows = 16\)",
        ),
        (lambda d: d.__setitem__("adjacent_windows", {"a": 1}), "adjacent_windows must be an array"),
    ],
)
def test_bad_per_window_fields_are_refused_naming_the_field(stability_runs, change, message):
    data = read(stability_runs["pydoc"])
    assert data["data"]["windows"] == 16
    change(data)
    with pytest.raises(ResultError, match=message):
        AngularResult.from_dict(data, "bad.json")
