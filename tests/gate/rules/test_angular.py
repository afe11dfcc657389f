"""The gate's angular rules: lazy blocks, the mean adjacent distance, each block's distance beyond its noise."""

from __future__ import annotations

import math

import pytest
from factories import (
    GATE_ADJACENT,
    angular_from_adjacent,
    distance_matrix,
    write_result,
)

from layerprobe.gate import GateRules, load_rules
from layerprobe.gate.render import (
    render_markdown,
    verdict_to_dict,
)
from layerprobe.gate.verdict import compare_paths, compare_results
from layerprobe.results import angular_summary


def by_name(verdict) -> dict[str, bool]:
    return {f"{r.kind}:{r.name}": r.passed for r in verdict.results}


def by_name_of(comparison) -> dict[str, bool]:
    return {r.name: r.passed for r in comparison.results}


def test_identical_angular_results_pass(tmp_path):
    verdict = compare_paths(
        write_result(tmp_path, "b.json", angular_from_adjacent(GATE_ADJACENT)),
        write_result(tmp_path, "c.json", angular_from_adjacent(GATE_ADJACENT, "org/cand")),
    )
    assert verdict.passed
    assert by_name(verdict) == {"angular:lazy_blocks": True, "angular:mean_adjacent": True}
    lazy, mean = verdict.results
    assert (lazy.baseline, lazy.candidate, lazy.change) == (1, 1, 0)
    assert mean.baseline == pytest.approx(0.325) and mean.change == pytest.approx(0.0)


def test_one_more_lazy_block_fails_only_the_lazy_rule():
    cand = [0.5, 0.55, 0.15, 0.1]  # same mean, block 2 became lazy
    comp = compare_results(angular_from_adjacent(GATE_ADJACENT), angular_from_adjacent(cand), GateRules())
    lazy, mean = comp.results
    assert not lazy.passed and mean.passed
    assert (lazy.baseline, lazy.candidate, lazy.change, lazy.limit) == (1, 2, 1, 0)
    assert lazy.details["newly_lazy_by_index"] == [2]
    assert compare_results(
        angular_from_adjacent(GATE_ADJACENT), angular_from_adjacent(cand), GateRules(max_lazy_increase=1)
    ).passed


def test_falling_mean_adjacent_distance_fails_only_the_mean_rule():
    cand = [0.45, 0.37, 0.27, 0.1]  # mean falls by 0.0275, no new lazy block
    lazy, mean = compare_results(angular_from_adjacent(GATE_ADJACENT), angular_from_adjacent(cand), GateRules()).results
    assert lazy.passed and not mean.passed
    assert mean.change == pytest.approx(0.0275)
    assert compare_results(
        angular_from_adjacent(GATE_ADJACENT), angular_from_adjacent(cand), GateRules(adjacent_tolerance=0.03)
    ).passed


def test_a_fall_exactly_at_the_tolerance_passes_despite_float_rounding():
    base, cand = [0.3, 0.3], [0.28, 0.28]  # 0.3 - 0.28 = 0.020000000000000018 in floats
    assert compare_results(
        angular_from_adjacent(base), angular_from_adjacent(cand), GateRules(adjacent_tolerance=0.02)
    ).passed
    assert not compare_results(
        angular_from_adjacent(base), angular_from_adjacent(cand), GateRules(adjacent_tolerance=0.019)
    ).passed


def test_lazy_blocks_are_recounted_with_the_chosen_threshold_not_read_from_the_stored_summary(tmp_path):
    stale = angular_summary(distance_matrix([0.5, 0.3, 0.5, 0.5]), 0.2)  # says: 0 lazy blocks
    base = write_result(tmp_path, "b.json", angular_from_adjacent([0.5, 0.5, 0.5, 0.5]))
    cand = write_result(tmp_path, "c.json", angular_from_adjacent([0.5, 0.3, 0.5, 0.5], summary=stale))
    rules = load_rules(None, lazy_threshold=0.35, adjacent_tolerance=0.1)
    lazy = compare_paths(base, cand, rules).results[0]
    assert not lazy.passed and lazy.candidate == 1 and lazy.thresholds["lazy_threshold"] == 0.35
    assert compare_paths(base, cand, load_rules(None, adjacent_tolerance=0.1)).passed


def test_nan_adjacent_distances_are_not_lazy_and_an_all_nan_mean_fails():
    nan = float("nan")
    lazy, mean = compare_results(
        angular_from_adjacent(GATE_ADJACENT), angular_from_adjacent([nan, nan, nan, nan]), GateRules()
    ).results
    assert lazy.passed and lazy.details["nonfinite_adjacent"]["candidate"] == [0, 1, 2, 3]
    assert not mean.passed and "no finite adjacent distance" in mean.message


def test_a_pruned_angular_candidate_uses_its_own_stack_and_reports_the_layer_difference(tmp_path):
    base = write_result(tmp_path, "b/angular.json", angular_from_adjacent([0.5, 0.4, 0.1, 0.1, 0.3, 0.1]))
    cand = write_result(tmp_path, "c/angular.json", angular_from_adjacent([0.5, 0.4, 0.3, 0.1], "org/pruned"))
    verdict = compare_paths(base, cand)
    assert verdict.passed
    lazy = verdict.results[0]
    assert (lazy.baseline, lazy.candidate) == (3, 1)
    comp = verdict.comparisons[0]
    assert (comp.baseline.num_layers, comp.candidate.num_layers) == (6, 4)
    assert "L differs" in comp.notes[0] and "0–3" in comp.notes[0]
    assert verdict_to_dict(verdict)["comparisons"][0]["layer_difference"] == -2


def test_different_measurement_data_is_noted():
    comp = compare_results(
        angular_from_adjacent(GATE_ADJACENT), angular_from_adjacent(GATE_ADJACENT, positions="last"), GateRules()
    )
    assert comp.passed and any("positions" in note for note in comp.notes)


def test_with_stderrs_a_block_fall_counts_only_beyond_its_noise():
    cand = [0.5, 0.35, 0.3, 0.1]  # block 1 falls by 0.05; the mean only by 0.0125
    noisy = compare_results(
        angular_from_adjacent(GATE_ADJACENT, stderr=0.02), angular_from_adjacent(cand, stderr=0.02), GateRules()
    )
    assert by_name_of(noisy) == {"lazy_blocks": True, "mean_adjacent": True, "adjacent_distance": True}
    rule = noisy.results[2]
    assert rule.limit == pytest.approx(2.0 * math.hypot(0.02, 0.02)) and rule.change == pytest.approx(0.05)
    assert not any("no-stderr" in note for note in noisy.notes)

    precise = compare_results(
        angular_from_adjacent(GATE_ADJACENT, stderr=0.01), angular_from_adjacent(cand, stderr=0.01), GateRules()
    )
    rule = precise.results[2]
    assert not rule.passed and precise.results[1].passed
    assert rule.details["failed_layers"] == [1] and rule.limit == pytest.approx(2.0 * math.hypot(0.01, 0.01))
    assert rule.details["layers"][1]["fall"] == pytest.approx(0.05)
    # A larger factor widens it; the absolute tolerance is the floor under a tiny stderr.
    assert compare_results(
        angular_from_adjacent(GATE_ADJACENT, stderr=0.01),
        angular_from_adjacent(cand, stderr=0.01),
        GateRules(se_factor=4),
    ).passed
    tiny = compare_results(
        angular_from_adjacent(GATE_ADJACENT, stderr=1e-6),
        angular_from_adjacent(cand, stderr=1e-6),
        GateRules(adjacent_tolerance=0.06),
    )
    assert tiny.results[2].passed and tiny.results[2].limit == pytest.approx(0.06)
    assert (
        not compare_results(
            angular_from_adjacent(GATE_ADJACENT, stderr=1e-6),
            angular_from_adjacent(cand, stderr=1e-6),
            GateRules(adjacent_tolerance=0.04),
        )
        .results[2]
        .passed
    )


def test_an_unmeasured_block_in_the_candidate_fails_the_stderr_rule_and_a_nan_stderr_keeps_the_floor():
    nan = float("nan")
    rule = compare_results(
        angular_from_adjacent(GATE_ADJACENT, stderr=0.01),
        angular_from_adjacent([0.5, nan, 0.3, 0.1], stderr=0.01),
        GateRules(),
    ).results[2]
    assert not rule.passed and rule.details["failed_layers"] == [1]
    rule = compare_results(
        angular_from_adjacent(GATE_ADJACENT, stderr=nan), angular_from_adjacent(GATE_ADJACENT, stderr=nan), GateRules()
    ).results[2]
    assert rule.passed and rule.limit == pytest.approx(0.02)


@pytest.mark.parametrize("missing", ["baseline", "candidate", "both"])
def test_files_without_stderrs_compare_with_a_fallback_note(tmp_path, missing):
    base = angular_from_adjacent(GATE_ADJACENT, stderr=None if missing in ("baseline", "both") else 0.01)
    cand = angular_from_adjacent(
        [0.5, 0.35, 0.3, 0.1], "org/cand", stderr=None if missing in ("candidate", "both") else 0.01
    )
    verdict = compare_paths(write_result(tmp_path, "b.json", base), write_result(tmp_path, "c.json", cand))
    assert verdict.passed and by_name(verdict) == {"angular:lazy_blocks": True, "angular:mean_adjacent": True}
    (note,) = [n for n in verdict.comparisons[0].notes if "no-stderr fallback" in n]
    assert ("baseline and candidate" in note) == (missing == "both") and missing.replace("both", "baseline") in note
    assert "no-stderr fallback" in render_markdown(verdict)
