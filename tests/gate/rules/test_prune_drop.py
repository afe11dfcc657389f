"""The gate's per-layer ΔP rule on paired stderrs, and the unpaired fallback for files without them."""

from __future__ import annotations

import json
import math

import pytest

from layerprobe.gate import GateRules, compare_results
from layerprobe.results import MetricDrop, ModelInfo, PruneDropResult, RunInfo, TaskDrop, load_result, write_json

RUN = RunInfo(started_at="2025-01-01T00:00:00+00:00", seconds=1.0, versions={"layerprobe": "0"}, device="cpu")
INFO = ModelInfo("org/m", "main", None, "LlamaForCausalLM", "llama", "causal-lm", "float32", 4, "model.layers", "B")
PRUNED = [0.20, 0.60, 0.68, 0.69]


def metric(pruned, paired_se=None, own_se=0.05, baseline=0.70):
    fields = {}
    if paired_se is not None:
        deltas = [p - baseline for p in pruned]
        fields = {
            "delta_stderr": list(paired_se),
            "delta_ci95": [
                None if s is None else [d - 1.96 * s, d + 1.96 * s] for d, s in zip(deltas, paired_se, strict=True)
            ],
            "significant": [None if s is None else abs(d) > 1.96 * s for d, s in zip(deltas, paired_se, strict=True)],
            "delta_method": "paired_mean",
        }
    return MetricDrop(
        baseline=baseline,
        baseline_stderr=own_se,
        higher_is_better=True,
        layers=list(range(len(pruned))),
        pruned=list(pruned),
        stderr=[own_se] * len(pruned),
        **fields,
    )


def result(m: MetricDrop) -> PruneDropResult:
    task = TaskDrop(metrics={"acc": m}, num_fewshot=0, limit=None, samples=100)
    return PruneDropResult(model=INFO, engine="simple", settings={}, tasks={"arc": task}, run=RUN)


def layer_rule(verdict):
    return next(r for r in verdict.results if r.rule == "layer_delta")


def test_paired_stderrs_catch_a_regression_the_unpaired_ones_hide():
    worse = list(PRUNED)
    worse[2] -= 0.05  # ΔP(2) worse by 0.05
    paired = compare_results(result(metric(PRUNED, [0.01] * 4)), result(metric(worse, [0.01] * 4)), GateRules())
    rule = layer_rule(paired)
    # Allowed: 2 × sqrt(0.01² + 0.01²) of the paired ΔP stderrs, not of the pruned scores' own 0.05.
    assert rule.limit == pytest.approx(2 * math.hypot(0.01, 0.01))
    assert not rule.passed and rule.details["failed_layers"] == [2] and rule.details["stderr"] == "paired"
    assert "paired ΔP stderrs" in rule.criterion
    assert not any("unpaired" in note for note in paired.notes)
    # The same numbers without paired fields: the old rule, 2 × sqrt(0.05² + 0.05²) = 0.141, lets it pass.
    unpaired = compare_results(result(metric(PRUNED)), result(metric(worse)), GateRules())
    rule = layer_rule(unpaired)
    assert rule.passed and rule.limit == pytest.approx(2 * math.hypot(0.05, 0.05))
    assert rule.details["stderr"] == "unpaired" and "unpaired fallback" in rule.message
    assert any("baseline and candidate has no paired" in note for note in unpaired.notes)


def test_one_old_file_is_enough_for_the_fallback_and_it_is_named():
    verdict = compare_results(result(metric(PRUNED)), result(metric(PRUNED, [0.01] * 4)), GateRules())
    assert layer_rule(verdict).details["stderr"] == "unpaired"
    assert any("the baseline has no paired ΔP stderrs" in n for n in verdict.notes)


def test_paired_rule_uses_each_layers_own_stderr_and_factor():
    worse = list(PRUNED)
    worse[0] -= 0.03
    base, cand = metric(PRUNED, [0.02, 0.001, 0.001, 0.001]), metric(worse, [0.02, 0.001, 0.001, 0.001])
    assert compare_results(result(base), result(cand), GateRules(se_factor=2.0)).passed  # 0.03 ≤ 2 × 0.0283
    assert not compare_results(result(base), result(cand), GateRules(se_factor=1.0)).passed


def test_old_files_read_back_without_paired_fields_and_new_ones_round_trip(tmp_path):
    new = result(metric(PRUNED, [0.01, 0.02, None, 0.03]))
    path = write_json(tmp_path / "new.json", new.to_dict())
    back = load_result(path).tasks["arc"].metrics["acc"]
    assert back.paired and back.delta_stderr == [0.01, 0.02, None, 0.03]
    assert back.significant == new.tasks["arc"].metrics["acc"].significant
    old = new.to_dict()
    for field in ("delta_stderr", "delta_ci95", "significant", "delta_method", "bootstrap"):
        old["tasks"]["arc"]["metrics"]["acc"].pop(field)
    old["summary"] = {}
    (tmp_path / "old.json").write_text(json.dumps(old))
    legacy = load_result(tmp_path / "old.json")
    assert not legacy.tasks["arc"].metrics["acc"].paired
    assert legacy.summary["arc"]["significant_layers"] is None
    assert new.to_dict()["summary"]["arc"]["significant_layers"] == [0, 1]
