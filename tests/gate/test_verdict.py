"""`layerprobe compare`: every rule can fail on its own, thresholds come from the right place, outputs parse.

Results are built from the dataclasses in results.py with hand-picked numbers (no model), written with
`write_json`, and compared through the library and through a local Typer app that registers the same
command function cli.py will.
"""

from __future__ import annotations

import json
import math
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from layerprobe.cli.app import friendly_errors
from layerprobe.cli.compare import compare as compare_command
from layerprobe.core.errors import LayerprobeError, ResultError
from layerprobe.gate import GateRules, load_rules
from layerprobe.gate.figures import plot_verdict
from layerprobe.gate.render import (
    render,
    render_json,
    render_junit,
    render_markdown,
    render_table,
    verdict_to_dict,
)
from layerprobe.gate.verdict import compare_paths, compare_results
from layerprobe.results import (
    AngularResult,
    MetricDrop,
    ModelInfo,
    PruneDropResult,
    RunInfo,
    TaskDrop,
    angular_summary,
    write_json,
)

RUN = RunInfo(started_at="2025-01-01T00:00:00+00:00", seconds=1.0, versions={"layerprobe": "0"}, device="cpu")


def model_info(num_layers: int, model_id: str) -> ModelInfo:
    return ModelInfo(
        id=model_id,
        revision="main",
        commit=None,
        architecture="LlamaForCausalLM",
        model_type="llama",
        kind="causal-lm",
        dtype="float32",
        num_layers=num_layers,
        layer_path="model.layers",
        block_class="LlamaDecoderLayer",
    )


def distance_matrix(adjacent: list[float]) -> list[list[float]]:
    """A symmetric (L+1)×(L+1) matrix whose first off-diagonal is exactly `adjacent`."""
    size = len(adjacent) + 1
    matrix = [[0.0] * size for _ in range(size)]
    for i in range(size):
        for j in range(i + 1, size):
            total = sum(adjacent[i:j])
            matrix[i][j] = matrix[j][i] = total if math.isnan(total) else min(1.0, total)
    return matrix


def angular(
    adjacent: list[float], model_id: str = "org/base", summary=None, stderr: float | None = None, **data
) -> AngularResult:
    """With `stderr`, every off-diagonal entry gets that standard error (None: a file from before stderrs)."""
    size = len(adjacent) + 1
    errors = None if stderr is None else [[0.0 if i == j else stderr for j in range(size)] for i in range(size)]
    return AngularResult(
        model=model_info(len(adjacent), model_id),
        data={"dataset": "allenai/c4", "positions": "all", "tokens": 4096, **data},
        distance=distance_matrix(adjacent),
        nonfinite_tokens=0,
        run=RUN,
        tokens_per_second=1.0,
        summary=summary or {},
        distance_stderr=errors,
    )


def metric(baseline: float, pruned: list[float], stderr=0.01, baseline_stderr=0.01, hib=True, layers=None):
    stderrs = stderr if isinstance(stderr, list) else [stderr] * len(pruned)
    return MetricDrop(
        baseline=baseline,
        baseline_stderr=baseline_stderr,
        higher_is_better=hib,
        layers=layers if layers is not None else list(range(len(pruned))),
        pruned=pruned,
        stderr=stderrs,
    )


def prune(
    metrics_by_task: dict[str, dict[str, MetricDrop]], num_layers: int = 4, model_id: str = "org/base", limit=100
) -> PruneDropResult:
    tasks = {name: TaskDrop(metrics=m, num_fewshot=0, limit=limit, samples=100) for name, m in metrics_by_task.items()}
    return PruneDropResult(model=model_info(num_layers, model_id), engine="simple", settings={}, tasks=tasks, run=RUN)


BASE_ADJ = [0.5, 0.4, 0.3, 0.1]  # 1 lazy block (3), mean 0.325
BASE_PRUNED = [0.20, 0.60, 0.68, 0.69]  # ΔP = -0.5, -0.1, -0.02, -0.01


def base_prune(**kw) -> PruneDropResult:
    return prune({"arc_easy": {"acc": metric(0.70, BASE_PRUNED), "acc_norm": metric(0.72, [0.3, 0.6, 0.7, 0.7])}}, **kw)


def by_name(verdict) -> dict[str, bool]:
    return {f"{r.kind}:{r.name}": r.passed for r in verdict.results}


def write(tmp_path: Path, name: str, result) -> Path:
    return write_json(tmp_path / name, result.to_dict())


def run_dirs(tmp_path: Path, base: dict, cand: dict) -> tuple[Path, Path]:
    for side, results in (("base", base), ("cand", cand)):
        for file_name, result in results.items():
            write_json(tmp_path / side / file_name, result.to_dict())
    return tmp_path / "base", tmp_path / "cand"


# --- angular rules ---------------------------------------------------------------------------------------


def test_identical_angular_results_pass(tmp_path):
    verdict = compare_paths(
        write(tmp_path, "b.json", angular(BASE_ADJ)), write(tmp_path, "c.json", angular(BASE_ADJ, "org/cand"))
    )
    assert verdict.passed
    assert by_name(verdict) == {"angular:lazy_blocks": True, "angular:mean_adjacent": True}
    lazy, mean = verdict.results
    assert (lazy.baseline, lazy.candidate, lazy.change) == (1, 1, 0)
    assert mean.baseline == pytest.approx(0.325) and mean.change == pytest.approx(0.0)


def test_one_more_lazy_block_fails_only_the_lazy_rule():
    cand = [0.5, 0.55, 0.15, 0.1]  # same mean, block 2 became lazy
    comp = compare_results(angular(BASE_ADJ), angular(cand), GateRules())
    lazy, mean = comp.results
    assert not lazy.passed and mean.passed
    assert (lazy.baseline, lazy.candidate, lazy.change, lazy.limit) == (1, 2, 1, 0)
    assert lazy.details["newly_lazy_by_index"] == [2]
    assert compare_results(angular(BASE_ADJ), angular(cand), GateRules(max_lazy_increase=1)).passed


def test_falling_mean_adjacent_distance_fails_only_the_mean_rule():
    cand = [0.45, 0.37, 0.27, 0.1]  # mean falls by 0.0275, no new lazy block
    lazy, mean = compare_results(angular(BASE_ADJ), angular(cand), GateRules()).results
    assert lazy.passed and not mean.passed
    assert mean.change == pytest.approx(0.0275)
    assert compare_results(angular(BASE_ADJ), angular(cand), GateRules(adjacent_tolerance=0.03)).passed


def test_a_fall_exactly_at_the_tolerance_passes_despite_float_rounding():
    base, cand = [0.3, 0.3], [0.28, 0.28]  # 0.3 - 0.28 = 0.020000000000000018 in floats
    assert compare_results(angular(base), angular(cand), GateRules(adjacent_tolerance=0.02)).passed
    assert not compare_results(angular(base), angular(cand), GateRules(adjacent_tolerance=0.019)).passed


def test_lazy_blocks_are_recounted_with_the_chosen_threshold_not_read_from_the_stored_summary(tmp_path):
    stale = angular_summary(distance_matrix([0.5, 0.3, 0.5, 0.5]), 0.2)  # says: 0 lazy blocks
    base = write(tmp_path, "b.json", angular([0.5, 0.5, 0.5, 0.5]))
    cand = write(tmp_path, "c.json", angular([0.5, 0.3, 0.5, 0.5], summary=stale))
    rules = load_rules(None, lazy_threshold=0.35, adjacent_tolerance=0.1)
    lazy = compare_paths(base, cand, rules).results[0]
    assert not lazy.passed and lazy.candidate == 1 and lazy.thresholds["lazy_threshold"] == 0.35
    assert compare_paths(base, cand, load_rules(None, adjacent_tolerance=0.1)).passed


def test_nan_adjacent_distances_are_not_lazy_and_an_all_nan_mean_fails():
    nan = float("nan")
    lazy, mean = compare_results(angular(BASE_ADJ), angular([nan, nan, nan, nan]), GateRules()).results
    assert lazy.passed and lazy.details["nonfinite_adjacent"]["candidate"] == [0, 1, 2, 3]
    assert not mean.passed and "no finite adjacent distance" in mean.message


def test_a_pruned_angular_candidate_uses_its_own_stack_and_reports_the_layer_difference(tmp_path):
    base = write(tmp_path, "b/angular.json", angular([0.5, 0.4, 0.1, 0.1, 0.3, 0.1]))
    cand = write(tmp_path, "c/angular.json", angular([0.5, 0.4, 0.3, 0.1], "org/pruned"))
    verdict = compare_paths(base, cand)
    assert verdict.passed
    lazy = verdict.results[0]
    assert (lazy.baseline, lazy.candidate) == (3, 1)
    comp = verdict.comparisons[0]
    assert (comp.baseline.num_layers, comp.candidate.num_layers) == (6, 4)
    assert "L differs" in comp.notes[0] and "0–3" in comp.notes[0]
    assert verdict_to_dict(verdict)["comparisons"][0]["layer_difference"] == -2


def test_different_measurement_data_is_noted():
    comp = compare_results(angular(BASE_ADJ), angular(BASE_ADJ, positions="last"), GateRules())
    assert comp.passed and any("positions" in note for note in comp.notes)


def test_with_stderrs_a_block_fall_counts_only_beyond_its_noise():
    cand = [0.5, 0.35, 0.3, 0.1]  # block 1 falls by 0.05; the mean only by 0.0125
    noisy = compare_results(angular(BASE_ADJ, stderr=0.02), angular(cand, stderr=0.02), GateRules())
    assert by_name_of(noisy) == {"lazy_blocks": True, "mean_adjacent": True, "adjacent_distance": True}
    rule = noisy.results[2]
    assert rule.limit == pytest.approx(2.0 * math.hypot(0.02, 0.02)) and rule.change == pytest.approx(0.05)
    assert not any("no-stderr" in note for note in noisy.notes)

    precise = compare_results(angular(BASE_ADJ, stderr=0.01), angular(cand, stderr=0.01), GateRules())
    rule = precise.results[2]
    assert not rule.passed and precise.results[1].passed
    assert rule.details["failed_layers"] == [1] and rule.limit == pytest.approx(2.0 * math.hypot(0.01, 0.01))
    assert rule.details["layers"][1]["fall"] == pytest.approx(0.05)
    # A larger factor widens it; the absolute tolerance is the floor under a tiny stderr.
    assert compare_results(angular(BASE_ADJ, stderr=0.01), angular(cand, stderr=0.01), GateRules(se_factor=4)).passed
    tiny = compare_results(
        angular(BASE_ADJ, stderr=1e-6), angular(cand, stderr=1e-6), GateRules(adjacent_tolerance=0.06)
    )
    assert tiny.results[2].passed and tiny.results[2].limit == pytest.approx(0.06)
    assert (
        not compare_results(
            angular(BASE_ADJ, stderr=1e-6), angular(cand, stderr=1e-6), GateRules(adjacent_tolerance=0.04)
        )
        .results[2]
        .passed
    )


def test_an_unmeasured_block_in_the_candidate_fails_the_stderr_rule_and_a_nan_stderr_keeps_the_floor():
    nan = float("nan")
    rule = compare_results(
        angular(BASE_ADJ, stderr=0.01), angular([0.5, nan, 0.3, 0.1], stderr=0.01), GateRules()
    ).results[2]
    assert not rule.passed and rule.details["failed_layers"] == [1]
    rule = compare_results(angular(BASE_ADJ, stderr=nan), angular(BASE_ADJ, stderr=nan), GateRules()).results[2]
    assert rule.passed and rule.limit == pytest.approx(0.02)


@pytest.mark.parametrize("missing", ["baseline", "candidate", "both"])
def test_files_without_stderrs_compare_with_a_fallback_note(tmp_path, missing):
    base = angular(BASE_ADJ, stderr=None if missing in ("baseline", "both") else 0.01)
    cand = angular([0.5, 0.35, 0.3, 0.1], "org/cand", stderr=None if missing in ("candidate", "both") else 0.01)
    verdict = compare_paths(write(tmp_path, "b.json", base), write(tmp_path, "c.json", cand))
    assert verdict.passed and by_name(verdict) == {"angular:lazy_blocks": True, "angular:mean_adjacent": True}
    (note,) = [n for n in verdict.comparisons[0].notes if "no-stderr fallback" in n]
    assert ("baseline and candidate" in note) == (missing == "both") and missing.replace("both", "baseline") in note
    assert "no-stderr fallback" in render_markdown(verdict)


def by_name_of(comparison) -> dict[str, bool]:
    return {r.name: r.passed for r in comparison.results}


# --- prune-drop rules ------------------------------------------------------------------------------------


def test_identical_prune_drop_results_pass(tmp_path):
    verdict = compare_paths(write(tmp_path, "b.json", base_prune()), write(tmp_path, "c.json", base_prune()))
    assert verdict.passed
    assert by_name(verdict) == {
        "prune_drop:baseline_score[arc_easy/acc]": True,
        "prune_drop:layer_delta[arc_easy/acc]": True,
    }


def test_a_lower_full_model_score_fails_only_the_baseline_score_rule():
    # Every pruned score moves with the baseline, so each ΔP is unchanged.
    cand = prune({"arc_easy": {"acc": metric(0.68, [p - 0.02 for p in BASE_PRUNED])}})
    score, layers = compare_results(base_prune(), cand, GateRules()).results
    assert not score.passed and layers.passed
    assert score.change == pytest.approx(0.02) and score.limit == 0.01
    assert compare_results(base_prune(), cand, GateRules(max_drop=0.02)).passed


def test_a_score_drop_exactly_at_max_drop_passes_despite_float_rounding():
    cand = prune({"arc_easy": {"acc": metric(0.69, [p - 0.01 for p in BASE_PRUNED])}})  # 0.7 - 0.69 > 0.01
    assert compare_results(base_prune(), cand, GateRules(max_drop=0.01)).passed
    assert not compare_results(base_prune(), cand, GateRules(max_drop=0.0099)).passed


def test_the_score_rule_is_sign_aware_for_lower_is_better_metrics():
    def ppl(baseline):
        return prune({"wiki": {"word_perplexity": metric(baseline, [baseline + 5.0] * 4, hib=False)}})

    worse = compare_results(ppl(10.0), ppl(10.5), GateRules(max_drop=0.1)).results[0]
    better = compare_results(ppl(10.0), ppl(9.0), GateRules(max_drop=0.1)).results[0]
    assert not worse.passed and worse.change == pytest.approx(0.5)
    assert better.passed and better.change == pytest.approx(-1.0)


def test_a_layer_whose_removal_costs_more_fails_only_the_layer_rule():
    pruned = list(BASE_PRUNED)
    pruned[2] -= 0.03  # ΔP(2) worse by 0.03 > 2 × sqrt(2) × 0.01 = 0.0283
    score, layers = compare_results(
        base_prune(), prune({"arc_easy": {"acc": metric(0.70, pruned)}}), GateRules()
    ).results
    assert score.passed and not layers.passed
    assert layers.details["failed_layers"] == [2]
    assert layers.change == pytest.approx(0.03) and layers.limit == pytest.approx(2 * math.sqrt(2) * 0.01)
    pruned[2] += 0.002  # worse by 0.028: within 2 SE
    assert compare_results(base_prune(), prune({"arc_easy": {"acc": metric(0.70, pruned)}}), GateRules()).passed
    assert not compare_results(
        base_prune(), prune({"arc_easy": {"acc": metric(0.70, pruned)}}), GateRules(se_factor=1.0)
    ).passed


def test_se_factor_scales_the_allowed_worsening():
    pruned = list(BASE_PRUNED)
    pruned[1] -= 0.02
    cand = prune({"arc_easy": {"acc": metric(0.70, pruned)}})
    assert compare_results(base_prune(), cand, GateRules(se_factor=2.0)).passed
    assert not compare_results(base_prune(), cand, GateRules(se_factor=1.0)).passed


def test_a_missing_stderr_counts_as_zero_and_is_said():
    pruned = list(BASE_PRUNED)
    pruned[3] -= 0.001
    cand = prune({"arc_easy": {"acc": metric(0.70, pruned, stderr=[0.01, 0.01, 0.01, None])}})
    base = prune({"arc_easy": {"acc": metric(0.70, BASE_PRUNED, stderr=[0.01, 0.01, 0.01, None])}})
    layers = compare_results(base, cand, GateRules()).results[1]
    assert not layers.passed and layers.details["failed_layers"] == [3]
    assert layers.details["stderr_missing"] == {"baseline": [3], "candidate": [3]}
    assert "stderr missing for layers [3], counted as 0" in layers.message


def test_a_layer_that_is_catastrophic_in_both_is_no_change_but_nan_fails():
    inf, nan = float("inf"), float("nan")
    base = prune({"w": {"ppl": metric(10.0, [inf, 11.0], hib=False)}}, num_layers=2)
    assert compare_results(base, prune({"w": {"ppl": metric(10.0, [inf, 11.0], hib=False)}}, 2), GateRules()).passed
    broken = compare_results(base, prune({"w": {"ppl": metric(10.0, [inf, nan], hib=False)}}, 2), GateRules())
    assert broken.results[1].details["failed_layers"] == [1]


def test_a_pruned_prune_drop_candidate_is_matched_over_the_common_layers():
    cand = prune({"arc_easy": {"acc": metric(0.70, BASE_PRUNED[:2] + [0.60])}}, num_layers=3)
    comp = compare_results(base_prune(), cand, GateRules())
    layers = comp.results[1]
    assert layers.details["common_layers"] == [0, 1, 2]
    assert layers.details["failed_layers"] == [2]  # ΔP(2) went from -0.02 to -0.10
    assert "L differs" in comp.notes[0] and "(-1)" in comp.notes[0]


def test_tasks_in_only_one_result_are_skipped_and_noted():
    cand = prune({"arc_easy": {"acc": metric(0.70, BASE_PRUNED)}, "mmlu": {"acc": metric(0.3, [0.3] * 4)}})
    comp = compare_results(base_prune(), cand, GateRules())
    assert comp.passed and {r.subject for r in comp.results} == {"arc_easy/acc"}
    assert any("'mmlu' only in the candidate" in note for note in comp.notes)


def test_the_gated_metric_can_be_chosen_in_the_rules_file(tmp_path):
    cand = prune({"arc_easy": {"acc": metric(0.70, BASE_PRUNED), "acc_norm": metric(0.60, [0.3, 0.6, 0.6, 0.6])}})
    assert compare_results(base_prune(), cand, GateRules()).passed  # primary metric (acc) unchanged
    for text in ('[prune_drop]\nmetric = "acc_norm"\n', '[prune_drop]\nmetrics = { arc_easy = "acc_norm" }\n'):
        (tmp_path / "gate.toml").write_text(text)
        results = compare_results(base_prune(), cand, load_rules(tmp_path / "gate.toml")).results
        assert {r.subject for r in results} == {"arc_easy/acc_norm"} and not results[0].passed
    (tmp_path / "gate.toml").write_text('[prune_drop]\nmetric = "f1"\n')
    with pytest.raises(ResultError, match="no metric 'f1'"):
        compare_results(base_prune(), cand, load_rules(tmp_path / "gate.toml"))


# --- thresholds: defaults < rules file < flags -----------------------------------------------------------


def test_rules_file_sets_thresholds_and_flags_override_it(tmp_path):
    path = tmp_path / "gate.toml"
    path.write_text("[angular]\nlazy_threshold = 0.3\nmax_lazy_increase = 2\n\n[prune_drop]\nmax_drop = 0.05\n")
    rules = load_rules(path, max_drop=0.02, se_factor=None)
    assert (rules.lazy_threshold, rules.max_lazy_increase, rules.max_drop, rules.se_factor) == (0.3, 2, 0.02, 2.0)
    table = rules.to_dict()
    assert table["angular"]["lazy_threshold"] == {"value": 0.3, "source": "rules file"}
    assert table["prune_drop"]["max_drop"] == {"value": 0.02, "source": "flag"}
    assert table["prune_drop"]["se_factor"] == {"value": 2.0, "source": "default"}
    assert table["angular"]["adjacent_tolerance"]["value"] == 0.02


@pytest.mark.parametrize(
    "text, match",
    [
        ("[prune_drop]\nmax_drpo = 0.1\n", "Did you mean 'max_drop'"),
        ("[angluar]\nlazy_threshold = 0.1\n", "Did you mean 'angular'"),
        ("max_drop = 0.1\n", r"Put max_drop under \[prune_drop\]"),
        ("[prune_drop]\nmax_drop = -0.1\n", "must be a number ≥ 0"),
        ("[angular]\nlazy_threshold = 1.5\n", r"must be in \(0, 1\]"),
        ("[angular]\nmax_lazy_increase = 0.5\n", "whole number"),
        ("[prune_drop]\nse_factor = true\n", "must be a number"),
        ("[angular\n", "not valid TOML"),
    ],
)
def test_bad_rules_files_are_user_errors(tmp_path, text, match):
    path = tmp_path / "gate.toml"
    path.write_text(text)
    with pytest.raises(LayerprobeError) as info:
        load_rules(path)
    assert info.value.exit_code == 2
    assert re.search(match, str(info.value)), str(info.value)


def test_a_missing_rules_file_is_a_user_error(tmp_path):
    with pytest.raises(LayerprobeError, match="Cannot read rules file"):
        load_rules(tmp_path / "nope.toml")


# --- inputs: files, directories, bad input ---------------------------------------------------------------


def test_directories_compare_every_common_kind_and_skip_the_rest(tmp_path):
    base, cand = run_dirs(
        tmp_path,
        {"angular.json": angular(BASE_ADJ), "prune_drop.json": base_prune()},
        {"angular.json": angular(BASE_ADJ)},
    )
    verdict = compare_paths(base, cand)
    assert [c.kind for c in verdict.comparisons] == ["angular"]
    assert len(verdict.skipped) == 1 and verdict.skipped[0].startswith("prune_drop: only in the baseline")
    assert verdict_to_dict(verdict)["skipped"] == verdict.skipped


def test_directories_with_both_kinds_gate_on_both(tmp_path):
    cand_prune = prune({"arc_easy": {"acc": metric(0.60, [p - 0.1 for p in BASE_PRUNED])}})
    base, cand = run_dirs(
        tmp_path,
        {"angular.json": angular(BASE_ADJ), "prune_drop.json": base_prune()},
        {"angular.json": angular(BASE_ADJ), "prune_drop.json": cand_prune},
    )
    verdict = compare_paths(base, cand)
    assert [c.kind for c in verdict.comparisons] == ["angular", "prune_drop"]
    assert [c.passed for c in verdict.comparisons] == [True, False] and not verdict.passed
    assert [r.name for r in verdict.failed] == ["baseline_score[arc_easy/acc]"]


def bad_inputs(tmp_path: Path) -> dict[str, tuple[Path, Path]]:
    good = write(tmp_path, "good/angular.json", angular(BASE_ADJ))
    other = write(tmp_path, "other/prune_drop.json", base_prune())
    (tmp_path / "broken.json").write_text("{not json")
    future = angular(BASE_ADJ).to_dict() | {"schema": "layerprobe/angular@9"}
    no_task = prune({"mmlu": {"acc": metric(0.3, [0.3] * 4)}})
    ragged = angular(BASE_ADJ).to_dict()
    ragged["distance"][1] = ragged["distance"][1][:-1]
    (tmp_path / "empty").mkdir()
    return {
        "missing file": (good, tmp_path / "missing.json"),
        "missing baseline dir": (tmp_path / "nowhere", tmp_path / "good"),
        "kinds differ": (good, other),
        "file and directory": (good, tmp_path / "good"),
        "unreadable json": (good, tmp_path / "broken.json"),
        "schema version": (good, write_json(tmp_path / "future.json", future)),
        "no common task": (other, write(tmp_path, "no_task.json", no_task)),
        "ragged matrix": (good, write_json(tmp_path / "ragged.json", ragged)),
        "no common kind": (tmp_path / "good", tmp_path / "other"),
        "empty dir": (tmp_path / "good", tmp_path / "empty"),
    }


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
    baseline, candidate = bad_inputs(tmp_path)[case]
    with pytest.raises(ResultError):
        compare_paths(baseline, candidate)


# --- renderers -------------------------------------------------------------------------------------------


@pytest.fixture
def mixed_verdict(tmp_path):
    """Angular passes; prune-drop fails its layer rule at layer 2; a second prune task is skipped."""
    pruned = list(BASE_PRUNED)
    pruned[2] -= 0.1
    cand_prune = prune({"arc_easy": {"acc": metric(0.70, pruned)}}, model_id="org/cand")
    base, cand = run_dirs(
        tmp_path,
        {"angular.json": angular(BASE_ADJ), "prune_drop.json": base_prune()},
        {"angular.json": angular(BASE_ADJ, "org/cand"), "prune_drop.json": cand_prune},
    )
    return compare_paths(base, cand)


def test_json_output_parses_back_with_every_rule_and_threshold(mixed_verdict):
    data = json.loads(render_json(mixed_verdict))
    assert data["schema"] == "layerprobe/compare@1"
    assert data["verdict"] == "regression" and data["passed"] is False
    assert data["counts"] == {"rules": 4, "failed": 1, "skipped": 0}
    assert data["rules"]["prune_drop"]["se_factor"] == {"value": 2.0, "source": "default"}
    assert data["inputs"]["candidate"].endswith("cand")
    verdicts = {(c["kind"], r["name"]): r["passed"] for c in data["comparisons"] for r in c["results"]}
    assert verdicts == {
        ("angular", "lazy_blocks"): True,
        ("angular", "mean_adjacent"): True,
        ("prune_drop", "baseline_score[arc_easy/acc]"): True,
        ("prune_drop", "layer_delta[arc_easy/acc]"): False,
    }
    layer_rule = data["comparisons"][1]["results"][1]
    assert layer_rule["details"]["failed_layers"] == [2] and layer_rule["thresholds"]["se_factor"] == 2.0
    assert data["comparisons"][1]["candidate"]["model"] == "org/cand"


def test_json_output_has_no_nan_literals():
    nan = float("nan")
    comp_verdict = compare_results(angular(BASE_ADJ), angular([nan, nan, 0.4, 0.1]), GateRules())
    from layerprobe.gate.verdict import Verdict

    text = render_json(Verdict(Path("b"), Path("c"), GateRules(), [comp_verdict], []))
    assert "NaN" not in text and json.loads(text)["comparisons"][0]["results"][0]["details"]


def test_markdown_output_has_a_headline_and_one_row_per_rule(mixed_verdict):
    text = render_markdown(mixed_verdict)
    assert text.startswith("### ❌ layerprobe compare: regression (1 of 4 rules failed)")
    rows = [line for line in text.splitlines() if line.startswith("| ") and "`" in line]
    status = {row.split("|")[3].strip().strip("`"): row.split("|")[1].strip() for row in rows}
    assert status == {
        "lazy_blocks": "✅",
        "mean_adjacent": "✅",
        "baseline_score[arc_easy/acc]": "✅",
        "layer_delta[arc_easy/acc]": "❌",
    }
    assert all(len(re.split(r"(?<!\\)\|", row)) == 11 for row in rows)  # 9 cells between 10 pipes
    assert "- ❌ **prune_drop · layer_delta[arc_easy/acc]**: removing layer(s) [2]" in text


def test_markdown_escapes_pipes_in_task_names():
    from layerprobe.gate.verdict import Verdict

    comp = compare_results(
        prune({"a|b": {"acc": metric(0.7, [0.7] * 4)}}), prune({"a|b": {"acc": metric(0.6, [0.6] * 4)}}), GateRules()
    )
    text = render_markdown(Verdict(Path("b"), Path("c"), GateRules(), [comp], []))
    rows = [line for line in text.splitlines() if line.startswith("| ") and "`" in line]
    assert len(rows) == 2 and all(len(re.split(r"(?<!\\)\|", row)) == 11 for row in rows)
    assert "a\\|b/acc" in rows[0]


def test_markdown_headline_on_pass(tmp_path):
    verdict = compare_paths(write(tmp_path, "b.json", angular(BASE_ADJ)), write(tmp_path, "c.json", angular(BASE_ADJ)))
    assert render_markdown(verdict).startswith("### ✅ layerprobe compare: pass (2 rules)")


def test_junit_output_has_one_testcase_per_rule_and_failures_on_regressions(mixed_verdict, tmp_path):
    root = ET.fromstring(render_junit(mixed_verdict))
    assert root.tag == "testsuites" and root.get("tests") == "4" and root.get("failures") == "1"
    cases = {(c.get("classname"), c.get("name")): c for c in root.iter("testcase")}
    assert set(cases) == {
        ("layerprobe.compare.angular", "lazy_blocks"),
        ("layerprobe.compare.angular", "mean_adjacent"),
        ("layerprobe.compare.prune_drop", "baseline_score[arc_easy/acc]"),
        ("layerprobe.compare.prune_drop", "layer_delta[arc_easy/acc]"),
    }
    failed = [name for (_, name), case in cases.items() if case.find("failure") is not None]
    assert failed == ["layer_delta[arc_easy/acc]"]
    failure = cases[("layerprobe.compare.prune_drop", "layer_delta[arc_easy/acc]")].find("failure")
    assert "layer(s) [2]" in failure.get("message") and failure.get("type") == "regression"
    suites = {s.get("name"): s for s in root.iter("testsuite")}
    assert suites["layerprobe.compare.prune_drop"].get("failures") == "1"
    props = {p.get("name"): p.get("value") for p in suites["layerprobe.compare.angular"].iter("property")}
    assert props["lazy_threshold"] == "0.2" and props["baseline_layers"] == "4"


def test_junit_marks_skipped_kinds(tmp_path):
    base, cand = run_dirs(
        tmp_path,
        {"angular.json": angular(BASE_ADJ)},
        {"angular.json": angular(BASE_ADJ), "prune_drop.json": base_prune()},
    )
    root = ET.fromstring(render_junit(compare_paths(base, cand)))
    skipped = [c for c in root.iter("testcase") if c.find("skipped") is not None]
    assert [c.get("name") for c in skipped] == ["prune_drop"] and root.get("skipped") == "1"


def test_table_output_names_every_rule_and_the_verdict(mixed_verdict):
    text = render_table(mixed_verdict)
    for name in ("lazy_blocks", "mean_adjacent", "baseline_score[arc_easy/acc]", "layer_delta[arc_easy/acc]"):
        assert name in text
    assert text.count("FAIL") == 2 and "regression: 1 of 4 rules failed" in text  # row + failure line
    assert render(mixed_verdict, "table") == text


def test_unknown_format_is_a_user_error(mixed_verdict):
    with pytest.raises(LayerprobeError, match="Unknown --format 'html'"):
        render(mixed_verdict, "html")


def test_plots_are_written_next_to_the_candidate_or_in_out(tmp_path, mixed_verdict):
    paths = plot_verdict(mixed_verdict)
    assert sorted(p.name for p in paths) == ["compare_angular.png", "compare_prune_drop.png"]
    assert all(p.parent == tmp_path / "cand" and p.read_bytes()[:4] == b"\x89PNG" for p in paths)
    single = compare_paths(tmp_path / "base" / "angular.json", tmp_path / "cand" / "angular.json")
    assert plot_verdict(single, tmp_path / "plots") == [tmp_path / "plots" / "compare.png"]


# --- the command, through a local Typer app registered like cli.py will -----------------------------------


app = typer.Typer()
app.command("compare")(friendly_errors(compare_command))


@app.command("version")
def _version() -> None:  # a second command keeps `compare` a subcommand, as in the real app
    typer.echo("0")


runner = CliRunner()


def cli(*args: str):
    return runner.invoke(app, ["compare", *map(str, args)])


def test_cli_exit_zero_on_pass_and_writes_junit(tmp_path):
    base = write(tmp_path, "b/angular.json", angular(BASE_ADJ))
    cand = write(tmp_path, "c/angular.json", angular(BASE_ADJ))
    result = cli(base, cand, "--junit", tmp_path / "out" / "report.xml", "--no-plot")
    assert result.exit_code == 0, result.output
    assert "lazy_blocks" in result.stdout and "pass: all 2 rules passed" in result.stdout
    assert ET.parse(tmp_path / "out" / "report.xml").getroot().get("failures") == "0"
    assert not (tmp_path / "c" / "compare.png").exists()


def test_cli_exit_one_on_regression_with_markdown_only_on_stdout(tmp_path):
    base = write(tmp_path, "b/prune_drop.json", base_prune())
    cand = write(tmp_path, "c/prune_drop.json", prune({"arc_easy": {"acc": metric(0.67, BASE_PRUNED)}}))
    result = cli(base, cand, "--max-drop", "0.02", "--format", "markdown")
    assert result.exit_code == 1, result.output
    assert result.stdout.startswith("### ❌ layerprobe compare: regression")
    assert "compare.png" not in result.stdout and "wrote" in result.stderr
    assert (tmp_path / "c" / "compare.png").is_file()
    assert cli(base, cand, "--max-drop", "0.05", "--format", "markdown", "--no-plot").exit_code == 0


def test_cli_flags_override_the_rules_file(tmp_path):
    base = write(tmp_path, "b/prune_drop.json", base_prune())
    cand = write(tmp_path, "c/prune_drop.json", prune({"arc_easy": {"acc": metric(0.67, BASE_PRUNED)}}))
    (tmp_path / "gate.toml").write_text("[prune_drop]\nmax_drop = 0.05\nse_factor = 3\n")
    loose = cli(base, cand, "--rules", tmp_path / "gate.toml", "--format", "json", "--no-plot")
    assert loose.exit_code == 0, loose.output
    assert json.loads(loose.stdout)["rules"]["prune_drop"]["max_drop"] == {"value": 0.05, "source": "rules file"}
    strict = cli(base, cand, "--rules", tmp_path / "gate.toml", "--max-drop", "0.01", "--format", "json", "--no-plot")
    assert strict.exit_code == 1
    data = json.loads(strict.stdout)
    assert data["rules"]["prune_drop"]["max_drop"] == {"value": 0.01, "source": "flag"}
    assert data["rules"]["prune_drop"]["se_factor"] == {"value": 3.0, "source": "rules file"}


def test_cli_a_failed_plot_warns_without_changing_the_status_but_a_bad_junit_path_is_exit_two(tmp_path):
    base = write(tmp_path, "b/angular.json", angular(BASE_ADJ))
    (tmp_path / "blocked").write_text("a file where the plot directory should be")
    result = cli(base, base, "--out", tmp_path / "blocked")
    assert result.exit_code == 0 and "warning: no plot" in result.stderr
    result = cli(base, base, "--no-plot", "--junit", tmp_path / "blocked" / "report.xml")
    assert result.exit_code == 2 and "Cannot write --junit" in result.stderr


def test_cli_directory_mode_and_plot_out(tmp_path):
    base, cand = run_dirs(
        tmp_path,
        {"angular.json": angular(BASE_ADJ), "prune_drop.json": base_prune()},
        {"angular.json": angular(BASE_ADJ)},
    )
    result = cli(base, cand, "--format", "json", "--out", tmp_path / "plots")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["skipped"][0].startswith("prune_drop: only in the baseline")
    assert (tmp_path / "plots" / "compare.png").is_file()


@pytest.mark.parametrize(
    "case", ["missing file", "kinds differ", "unreadable json", "schema version", "no common kind"]
)
def test_cli_exit_two_on_bad_input(tmp_path, case):
    baseline, candidate = bad_inputs(tmp_path)[case]
    result = cli(baseline, candidate, "--no-plot")
    assert result.exit_code == 2, result.output
    assert "error:" in result.stderr and result.stdout == ""


def test_cli_exit_two_on_unknown_rule_and_unknown_format(tmp_path):
    base = write(tmp_path, "b/angular.json", angular(BASE_ADJ))
    (tmp_path / "gate.toml").write_text("[angular]\nlazy_treshold = 0.3\n")
    result = cli(base, base, "--rules", tmp_path / "gate.toml", "--no-plot")
    assert result.exit_code == 2 and "lazy_treshold" in result.stderr and "lazy_threshold" in result.stderr
    result = cli(base, base, "--format", "html", "--no-plot")
    flat = " ".join(re.sub("[│╭╮╰╯─]", " ", result.stderr).split())  # a real choice: Typer's usage box lists them
    assert result.exit_code == 2 and "'html' is not one of 'table', 'markdown', 'json'" in flat


# --- docs/ci.md: the examples must be what the code accepts --------------------------------------------


CI_DOC = Path(__file__).resolve().parents[2] / "docs" / "ci.md"


def fenced(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", CI_DOC.read_text(encoding="utf-8"), flags=re.S)


def test_the_documented_rules_file_loads_and_explains_every_key(tmp_path):
    (text,) = fenced("toml")
    (tmp_path / "gate.toml").write_text(text)
    rules = load_rules(tmp_path / "gate.toml")
    assert rules.metrics == {"arc_easy": "acc_norm"} and rules.se_factor == 2.0
    for key in (
        "lazy_threshold",
        "max_lazy_increase",
        "adjacent_tolerance",
        "max_drop",
        "se_factor",
        "metric",
        "metrics",
    ):
        assert re.search(rf"^#? ?\[?[\w.]*{key}\b", text, flags=re.M), key


def test_the_documented_workflow_is_valid_yaml_and_gates_with_compare():
    yaml = pytest.importorskip("yaml")
    workflow = next(yaml.safe_load(block) for block in fenced("yaml") if block.startswith("name:"))
    steps = workflow["jobs"]["layer-gate"]["steps"]
    run = "\n".join(step.get("run", "") for step in steps)
    assert run.index("pip install torch") < run.index('pip install "layerprobe')
    assert "layerprobe angular" in run and "layerprobe prune-drop" in run
    assert "--format markdown" in run and '>> "$GITHUB_STEP_SUMMARY"' in run and "--junit" in run
    cache = next(step for step in steps if step.get("uses", "").startswith("actions/cache"))
    assert cache["with"]["path"] == "~/.cache/huggingface" and "MODEL_REVISION" in cache["with"]["key"]
    assert any("secrets.HF_TOKEN" in str(step.get("env", {})) for step in steps)
