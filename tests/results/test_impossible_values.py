"""Impossible values are refused at read time (issue 26 §2): one line naming file and field, exit 2.

A distance of -Infinity is no failed measurement (that is NaN) and would be counted as lazy; a negative
standard error would make `track` call a block "surely below" the threshold; a reversed interval holds
nothing. Each is refused by every reader, with the range the field has.
"""

from __future__ import annotations

import pytest
from command_line import invoke
from factories import angular_dict, edited, prune_dict

from layerprobe.core.errors import ResultError
from layerprobe.results import load_result, write_json

INF = float("inf")
STDERR = [[0.0, 0.01, 0.02, 0.03], [0.01, 0.0, 0.02, 0.03], [0.02, 0.02, 0.0, 0.02], [0.03, 0.03, 0.02, 0.0]]


def with_stderr(row, value):
    stderr = [list(r) for r in STDERR]
    stderr[row][row + 1] = value
    return stderr


ANGULAR = [
    ("distance.1", [0.1, 0.0, -INF, 0.4], "distance[1][2] must be a number in [0, 1] (or NaN), got -Infinity"),
    ("distance.1", [0.1, 0.0, INF, 0.4], "distance[1][2] must be a number in [0, 1] (or NaN), got Infinity"),
    ("distance.1", [0.1, 0.0, -0.2, 0.4], "distance[1][2] must be a number in [0, 1] (or NaN), got -0.2"),
    ("distance_stderr", with_stderr(1, -0.05), "distance_stderr[1][2] must be a number ≥ 0 (or NaN), got -0.05"),
    ("tokens_per_second", -3.0, "tokens_per_second must be a number ≥ 0 (or NaN), got -3.0"),
]
PRUNE = [
    ("tasks.arc.metrics.acc.stderr", [0.1, -0.1, 0.1], "tasks.arc.metrics.acc.stderr[1] must be a number ≥ 0"),
    ("tasks.arc.metrics.acc.baseline_stderr", -0.01, "tasks.arc.metrics.acc.baseline_stderr must be a number ≥ 0"),
    (
        "tasks.arc.metrics.acc.delta_stderr",
        [0.1, -1, 0.1],
        "tasks.arc.metrics.acc.delta_stderr[1] must be a number ≥ 0",
    ),
    (
        "tasks.arc.metrics.acc.delta_ci95",
        [[-1, 1], [0.3, 0.1], None],
        "tasks.arc.metrics.acc.delta_ci95[1] must be an interval [low, high] with low ≤ high, got [0.3, 0.1]",
    ),
    ("settings.limit", -5, "settings.limit must be a number ≥ 0, got -5"),
]


@pytest.mark.parametrize(("path", "value", "message"), ANGULAR, ids=[f"{c[0]}-{i}" for i, c in enumerate(ANGULAR)])
def test_an_impossible_angular_value_is_refused(tmp_path, path, value, message):
    bad = write_json(tmp_path / "angular.json", edited(angular_dict() | {"distance_stderr": STDERR}, path, value))
    with pytest.raises(ResultError) as caught:
        load_result(bad)
    assert caught.value.message == f"{bad}: {message}"
    result = invoke("plot", bad)
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert message in " ".join(result.stderr.split())


@pytest.mark.parametrize(("path", "value", "message"), PRUNE, ids=[f"{c[0]}-{i}" for i, c in enumerate(PRUNE)])
def test_an_impossible_prune_drop_value_is_refused(tmp_path, path, value, message):
    data = prune_dict()
    data["tasks"]["arc"]["metrics"]["acc"]["delta_stderr"] = [0.1, 0.1, 0.1]
    data["tasks"]["arc"]["metrics"]["acc"]["delta_ci95"] = [[-1, 1], [-1, 1], None]
    bad = write_json(tmp_path / "prune_drop.json", edited(data, path, value))
    with pytest.raises(ResultError) as caught:
        load_result(bad)
    assert message in caught.value.message


def test_a_recorded_nan_stays_readable_where_a_range_is_checked(tmp_path):
    nan = float("nan")
    data = edited(angular_dict() | {"distance_stderr": with_stderr(0, nan)}, "distance.1", [0.1, 0.0, nan, 0.4])
    result = load_result(write_json(tmp_path / "angular.json", data))
    assert result.distance[1][2] != result.distance[1][2] and result.distance_stderr[0][1] != 0.0
