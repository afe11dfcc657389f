"""angular.json: the summary skips unmeasured entries; new fields round trip and older files read back."""

from __future__ import annotations

import math

import pytest
from factories import angular_from_walk

from layerprobe.core.errors import ResultError
from layerprobe.plots.heatmap import span_candidates
from layerprobe.results import AngularResult, angular_summary, load_result, write_json

pytestmark = pytest.mark.usefixtures("no_leaked_figures")


def test_summary_skips_unmeasured_entries_and_says_so():
    result = angular_from_walk(6, seed=5, nan_cells=[(2, 3), (0, 6)], stderr=0.01)
    d = result.distance
    d[2][3] = d[3][2] = float("nan")
    summary = angular_summary(d, stderr=result.distance_stderr)
    adjacent = [d[l][l + 1] for l in range(6)]
    finite = [v for v in adjacent if math.isfinite(v)]
    assert summary["mean_adjacent"] == pytest.approx(sum(finite) / len(finite))
    assert summary["unmeasured"] == [[0, 6], [2, 3]]
    assert "6" not in summary["most_redundant"]  # its only cell is unmeasured
    best = min((v, l) for l, v in enumerate(adjacent) if math.isfinite(v))
    assert summary["most_redundant"]["1"]["layer"] == best[1] != 2
    assert 2 not in summary["most_redundant"]["1"]["candidates"]
    assert summary["adjacent_stderr"] == [result.distance_stderr[l][l + 1] for l in range(6)]


def test_angular_json_round_trips_the_new_fields_and_reads_old_files(tmp_path):
    result = angular_from_walk(5, seed=2, nan_cells=[(1, 2)], stderr=0.01)
    counts = [[0] * 6 for _ in range(6)]
    counts[1][2] = counts[2][1] = 7
    paired = [[0.001 * (i + j) for j in range(6)] for i in range(6)]
    result = AngularResult(**{**result.__dict__, "nonfinite_positions": counts, "row_difference_stderr": paired})
    data = result.to_dict()
    assert list(data)[:8] == [
        "schema",
        "model",
        "data",
        "distance",
        "distance_stderr",
        "row_difference_stderr",
        "nonfinite_tokens",
        "nonfinite_positions",
    ]
    write_json(tmp_path / "new.json", data)
    again = load_result(tmp_path / "new.json")
    assert again.distance_stderr == result.distance_stderr and again.nonfinite_positions == counts
    assert again.row_difference_stderr == paired and again.summary["candidates_test"] == "paired"
    assert again.summary["most_redundant"]["1"]["clear"] in (True, False)

    old = dict(data)
    for key in ("distance_stderr", "row_difference_stderr", "nonfinite_positions", "summary"):
        del old[key]  # a file written before these fields existed
    write_json(tmp_path / "old.json", old)
    legacy = load_result(tmp_path / "old.json")
    assert legacy.distance_stderr is None and legacy.nonfinite_positions is None
    assert legacy.row_difference_stderr is None and legacy.summary["candidates_test"] is None
    choice = legacy.summary["most_redundant"]["1"]
    assert choice["clear"] is None and choice["candidates"] is None and choice["stderr"] is None
    assert span_candidates(legacy) == {}

    bad = dict(data, distance_stderr=[[0.1] * 6] * 5)
    write_json(tmp_path / "bad.json", bad)
    with pytest.raises(ResultError, match="6×6"):
        load_result(tmp_path / "bad.json")
