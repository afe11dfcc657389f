"""`compare`'s inputs: two files or two run directories, paired by kind; bad input is a ResultError."""

from __future__ import annotations

import pytest
from factories import (
    GATE_ADJACENT,
    GATE_PRUNED,
    angular_from_adjacent,
    bad_compare_inputs,
    gate_baseline_prune,
    metric_drop,
    prune_drop_result,
    write_run_dirs,
)

from layerprobe.core.errors import ResultError
from layerprobe.gate.render import verdict_to_dict
from layerprobe.gate.verdict import compare_paths


def test_directories_compare_every_common_kind_and_skip_the_rest(tmp_path):
    base, cand = write_run_dirs(
        tmp_path,
        {"angular.json": angular_from_adjacent(GATE_ADJACENT), "prune_drop.json": gate_baseline_prune()},
        {"angular.json": angular_from_adjacent(GATE_ADJACENT)},
    )
    verdict = compare_paths(base, cand)
    assert [c.kind for c in verdict.comparisons] == ["angular"]
    assert len(verdict.skipped) == 1 and verdict.skipped[0].startswith("prune_drop: only in the baseline")
    assert verdict_to_dict(verdict)["skipped"] == verdict.skipped


def test_directories_with_both_kinds_gate_on_both(tmp_path):
    cand_prune = prune_drop_result({"arc_easy": {"acc": metric_drop(0.60, [p - 0.1 for p in GATE_PRUNED])}})
    base, cand = write_run_dirs(
        tmp_path,
        {"angular.json": angular_from_adjacent(GATE_ADJACENT), "prune_drop.json": gate_baseline_prune()},
        {"angular.json": angular_from_adjacent(GATE_ADJACENT), "prune_drop.json": cand_prune},
    )
    verdict = compare_paths(base, cand)
    assert [c.kind for c in verdict.comparisons] == ["angular", "prune_drop"]
    assert [c.passed for c in verdict.comparisons] == [True, False] and not verdict.passed
    assert [r.name for r in verdict.failed] == ["baseline_score[arc_easy/acc]"]


@pytest.mark.parametrize(
    "case",
    [
        "missing file",
        "missing baseline dir",
        "kinds differ",
        "file and directory",
        "unreadable json",
        "schema version",
        "no common task",
        "ragged matrix",
        "no common kind",
        "empty dir",
    ],
)
def test_bad_input_raises_result_error(tmp_path, case):
    baseline, candidate = bad_compare_inputs(tmp_path)[case]
    with pytest.raises(ResultError):
        compare_paths(baseline, candidate)
