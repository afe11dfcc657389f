"""The gate's prune-drop rules: the full model's score, and each layer's ΔP within its (paired) noise.

Per layer the allowed worsening is se_factor × the paired ΔP stderrs when both files have them, and the
unpaired combination of the pruned scores' own stderrs (said in a note) when one of them does not.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from factories import (
    GATE_PRUNED,
    acc_drop,
    arc_result,
    gate_baseline_prune,
    metric_drop,
    prune_drop_result,
    write_result,
)

from layerprobe.core.errors import ResultError
from layerprobe.gate import GateRules, compare_results, load_rules
from layerprobe.gate.verdict import compare_paths

PRUNED = GATE_PRUNED


def layer_rule(verdict):
    return next(r for r in verdict.results if r.rule == "layer_delta")


def test_paired_stderrs_catch_a_regression_the_unpaired_ones_hide():
    worse = list(PRUNED)
    worse[2] -= 0.05  # ΔP(2) worse by 0.05
    paired = compare_results(
        arc_result(acc_drop(PRUNED, [0.01] * 4)), arc_result(acc_drop(worse, [0.01] * 4)), GateRules()
    )
    rule = layer_rule(paired)
    # Allowed: 2 × sqrt(0.01² + 0.01²) of the paired ΔP stderrs, not of the pruned scores' own 0.05.
    assert rule.limit == pytest.approx(2 * math.hypot(0.01, 0.01))
    assert not rule.passed and rule.details["failed_layers"] == [2] and rule.details["stderr"] == "paired"
    assert "paired ΔP stderrs" in rule.criterion
    assert not any("unpaired" in note for note in paired.notes)
    # The same numbers without paired fields: the old rule, 2 × sqrt(0.05² + 0.05²) = 0.141, lets it pass.
    unpaired = compare_results(arc_result(acc_drop(PRUNED)), arc_result(acc_drop(worse)), GateRules())
    rule = layer_rule(unpaired)
    assert rule.passed and rule.limit == pytest.approx(2 * math.hypot(0.05, 0.05))
    assert rule.details["stderr"] == "unpaired" and "unpaired fallback" in rule.message
    assert any("baseline and candidate has no paired" in note for note in unpaired.notes)


def test_one_old_file_is_enough_for_the_fallback_and_it_is_named():
    verdict = compare_results(arc_result(acc_drop(PRUNED)), arc_result(acc_drop(PRUNED, [0.01] * 4)), GateRules())
    assert layer_rule(verdict).details["stderr"] == "unpaired"
    assert any("the baseline has no paired ΔP stderrs" in n for n in verdict.notes)


def test_paired_rule_uses_each_layers_own_stderr_and_factor():
    worse = list(PRUNED)
    worse[0] -= 0.03
    base, cand = acc_drop(PRUNED, [0.02, 0.001, 0.001, 0.001]), acc_drop(worse, [0.02, 0.001, 0.001, 0.001])
    assert compare_results(arc_result(base), arc_result(cand), GateRules(se_factor=2.0)).passed  # 0.03 ≤ 2 × 0.0283
    assert not compare_results(arc_result(base), arc_result(cand), GateRules(se_factor=1.0)).passed


# --- the full score and each layer, on unpaired stderrs ---------------------------------------------
def by_name(verdict) -> dict[str, bool]:
    return {f"{r.kind}:{r.name}": r.passed for r in verdict.results}


def test_identical_prune_drop_results_pass(tmp_path):
    verdict = compare_paths(
        write_result(tmp_path, "b.json", gate_baseline_prune()), write_result(tmp_path, "c.json", gate_baseline_prune())
    )
    assert verdict.passed
    assert by_name(verdict) == {
        "prune_drop:baseline_score[arc_easy/acc]": True,
        "prune_drop:layer_delta[arc_easy/acc]": True,
    }


def test_a_lower_full_model_score_fails_only_the_baseline_score_rule():
    # Every pruned score moves with the baseline, so each ΔP is unchanged.
    cand = prune_drop_result({"arc_easy": {"acc": metric_drop(0.68, [p - 0.02 for p in GATE_PRUNED])}})
    score, layers = compare_results(gate_baseline_prune(), cand, GateRules()).results
    assert not score.passed and layers.passed
    assert score.change == pytest.approx(0.02) and score.limit == 0.01
    assert compare_results(gate_baseline_prune(), cand, GateRules(max_drop=0.02)).passed


def test_a_score_drop_exactly_at_max_drop_passes_despite_float_rounding():
    cand = prune_drop_result(
        {"arc_easy": {"acc": metric_drop(0.69, [p - 0.01 for p in GATE_PRUNED])}}
    )  # 0.7 - 0.69 > 0.01
    assert compare_results(gate_baseline_prune(), cand, GateRules(max_drop=0.01)).passed
    assert not compare_results(gate_baseline_prune(), cand, GateRules(max_drop=0.0099)).passed


def test_the_score_rule_is_sign_aware_for_lower_is_better_metrics():
    def ppl(baseline):
        return prune_drop_result({"wiki": {"word_perplexity": metric_drop(baseline, [baseline + 5.0] * 4, hib=False)}})

    worse = compare_results(ppl(10.0), ppl(10.5), GateRules(max_drop=0.1)).results[0]
    better = compare_results(ppl(10.0), ppl(9.0), GateRules(max_drop=0.1)).results[0]
    assert not worse.passed and worse.change == pytest.approx(0.5)
    assert better.passed and better.change == pytest.approx(-1.0)


def test_a_layer_whose_removal_costs_more_fails_only_the_layer_rule():
    pruned = list(GATE_PRUNED)
    pruned[2] -= 0.03  # ΔP(2) worse by 0.03 > 2 × sqrt(2) × 0.01 = 0.0283
    score, layers = compare_results(
        gate_baseline_prune(), prune_drop_result({"arc_easy": {"acc": metric_drop(0.70, pruned)}}), GateRules()
    ).results
    assert score.passed and not layers.passed
    assert layers.details["failed_layers"] == [2]
    assert layers.change == pytest.approx(0.03) and layers.limit == pytest.approx(2 * math.sqrt(2) * 0.01)
    pruned[2] += 0.002  # worse by 0.028: within 2 SE
    assert compare_results(
        gate_baseline_prune(), prune_drop_result({"arc_easy": {"acc": metric_drop(0.70, pruned)}}), GateRules()
    ).passed
    assert not compare_results(
        gate_baseline_prune(),
        prune_drop_result({"arc_easy": {"acc": metric_drop(0.70, pruned)}}),
        GateRules(se_factor=1.0),
    ).passed


def test_se_factor_scales_the_allowed_worsening():
    pruned = list(GATE_PRUNED)
    pruned[1] -= 0.02
    cand = prune_drop_result({"arc_easy": {"acc": metric_drop(0.70, pruned)}})
    assert compare_results(gate_baseline_prune(), cand, GateRules(se_factor=2.0)).passed
    assert not compare_results(gate_baseline_prune(), cand, GateRules(se_factor=1.0)).passed


def test_a_missing_stderr_counts_as_zero_and_is_said():
    pruned = list(GATE_PRUNED)
    pruned[3] -= 0.001
    cand = prune_drop_result({"arc_easy": {"acc": metric_drop(0.70, pruned, stderr=[0.01, 0.01, 0.01, None])}})
    base = prune_drop_result({"arc_easy": {"acc": metric_drop(0.70, GATE_PRUNED, stderr=[0.01, 0.01, 0.01, None])}})
    layers = compare_results(base, cand, GateRules()).results[1]
    assert not layers.passed and layers.details["failed_layers"] == [3]
    assert layers.details["stderr_missing"] == {"baseline": [3], "candidate": [3]}
    assert "stderr missing for layers [3], counted as 0" in layers.message


def test_a_layer_that_is_catastrophic_in_both_is_no_change_but_nan_fails():
    inf, nan = float("inf"), float("nan")
    base = prune_drop_result({"w": {"ppl": metric_drop(10.0, [inf, 11.0], hib=False)}}, num_layers=2)
    assert compare_results(
        base, prune_drop_result({"w": {"ppl": metric_drop(10.0, [inf, 11.0], hib=False)}}, 2), GateRules()
    ).passed
    broken = compare_results(
        base, prune_drop_result({"w": {"ppl": metric_drop(10.0, [inf, nan], hib=False)}}, 2), GateRules()
    )
    assert broken.results[1].details["failed_layers"] == [1]


def test_a_pruned_prune_drop_candidate_is_matched_over_the_common_layers():
    cand = prune_drop_result({"arc_easy": {"acc": metric_drop(0.70, GATE_PRUNED[:2] + [0.60])}}, num_layers=3)
    comp = compare_results(gate_baseline_prune(), cand, GateRules())
    layers = comp.results[1]
    assert layers.details["common_layers"] == [0, 1, 2]
    assert layers.details["failed_layers"] == [2]  # ΔP(2) went from -0.02 to -0.10
    assert "L differs" in comp.notes[0] and "(-1)" in comp.notes[0]


def test_tasks_in_only_one_result_are_skipped_and_noted():
    cand = prune_drop_result(
        {"arc_easy": {"acc": metric_drop(0.70, GATE_PRUNED)}, "mmlu": {"acc": metric_drop(0.3, [0.3] * 4)}}
    )
    comp = compare_results(gate_baseline_prune(), cand, GateRules())
    assert comp.passed and {r.subject for r in comp.results} == {"arc_easy/acc"}
    assert any("'mmlu' only in the candidate" in note for note in comp.notes)


def test_the_gated_metric_can_be_chosen_in_the_rules_file(tmp_path):
    cand = prune_drop_result(
        {"arc_easy": {"acc": metric_drop(0.70, GATE_PRUNED), "acc_norm": metric_drop(0.60, [0.3, 0.6, 0.6, 0.6])}}
    )
    assert compare_results(gate_baseline_prune(), cand, GateRules()).passed  # primary metric (acc) unchanged
    for text in ('[prune_drop]\nmetric = "acc_norm"\n', '[prune_drop]\nmetrics = { arc_easy = "acc_norm" }\n'):
        (tmp_path / "gate.toml").write_text(text)
        results = compare_results(gate_baseline_prune(), cand, load_rules(tmp_path / "gate.toml")).results
        assert {r.subject for r in results} == {"arc_easy/acc_norm"} and not results[0].passed
    (tmp_path / "gate.toml").write_text('[prune_drop]\nmetric = "f1"\n')
    with pytest.raises(ResultError, match="no metric 'f1'"):
        compare_results(gate_baseline_prune(), cand, load_rules(tmp_path / "gate.toml"))


def test_a_sequential_runs_layer_rule_uses_its_anytime_intervals():
    worse = list(PRUNED)
    worse[2] -= 0.05
    base, cand = acc_drop(PRUNED, [0.01] * 4), acc_drop(worse, [0.01] * 4)
    # Anytime intervals of half-width 0.1 stand for stderrs of 0.1 / 1.96: a 0.05 worsening is within 2 × that.
    wide = [[d - 0.1, d + 0.1] for d in cand.delta]
    sequential = replace(cand, items=[50] * 4, stop=["precision"] * 4, delta_cs95=wide)
    assert not layer_rule(compare_results(arc_result(base), arc_result(cand), GateRules())).passed
    rule = layer_rule(compare_results(arc_result(base), arc_result(sequential), GateRules()))
    assert rule.passed and rule.limit == pytest.approx(2 * math.hypot(0.01, 0.1 / 1.959963984540054))
    assert "anytime 95 % interval" in rule.criterion
