"""The `compare` rules for prune_drop.json, per task both results have: the full score and every layer's ΔP.

- `baseline_score`: the full model's score may get worse by at most `max_drop` (metric units).
- `layer_delta`: removing layer l may cost at most `se_factor` combined standard errors more in the
  candidate than in the baseline, layer by layer over the layers both evaluated.
"Worse" is sign-aware throughout: for a lower-is-better metric a rise is worse.
"""

from __future__ import annotations

import math

from layerprobe.core import ResultError
from layerprobe.gate.rules.record import RuleResult, change_text, within
from layerprobe.gate.rules.thresholds import GateRules
from layerprobe.results import MetricDrop, PruneDropResult
from layerprobe.stats import Z95

# Settings that, when they differ, make the two runs measure different things: limit, few-shot and task
# version change the questions. --limit and --num-fewshot are compared per task, as run.
SETTINGS_WATCHED = ("seed",)
TASK_WATCHED = ("num_fewshot", "limit", "version")


def prune_drop_rules(
    baseline: PruneDropResult, candidate: PruneDropResult, rules: GateRules
) -> tuple[list[RuleResult], list[str]]:
    """Per task both results have: the full model's score, and ΔP of every layer both evaluated.

    Returns:
        The rule results, and notes on tasks only one result has (they are skipped, not failed) and on
        results without paired stderrs.

    Raises:
        ResultError: no common task, the gated metric is missing from one side, the metrics disagree
            on direction, or no layer was evaluated in both.
    """
    notes = [
        f"task {task!r} only in the {role}: skipped"
        for role, mine, other in (("baseline", baseline, candidate), ("candidate", candidate, baseline))
        for task in mine.tasks
        if task not in other.tasks
    ]
    common = [task for task in baseline.tasks if task in candidate.tasks]
    if not common:
        raise ResultError(
            f"The prune-drop results share no task (baseline: {sorted(baseline.tasks)}, "
            f"candidate: {sorted(candidate.tasks)}).",
            hint="Run both with the same --tasks.",
        )
    results = []
    for task in common:
        name = rules.metric_for(task, baseline.tasks[task].primary_metric)
        base, cand = _metric(baseline, task, name, "baseline"), _metric(candidate, task, name, "candidate")
        if base.higher_is_better != cand.higher_is_better:
            raise ResultError(f"{task}/{name}: higher_is_better differs between baseline and candidate.")
        results += [
            _baseline_score_rule(task, name, base, cand, rules.max_drop),
            _layer_delta_rule(task, name, base, cand, rules.se_factor),
        ]
        if not (base.paired and cand.paired):
            lacking = " and ".join(role for role, m in (("baseline", base), ("candidate", cand)) if not m.paired)
            notes.append(
                f"{task}/{name}: the {lacking} has no paired ΔP stderrs (written before they existed); "
                "layer_delta used the unpaired fallback, the pruned scores' own stderrs"
            )
    return results, notes


def prune_drop_notes(baseline: PruneDropResult, candidate: PruneDropResult) -> list[str]:
    """One note per watched setting (SETTINGS_WATCHED, and per common task TASK_WATCHED) that differs."""
    notes = [
        f"settings.{k} differs: baseline {baseline.settings.get(k)!r}, candidate {candidate.settings.get(k)!r}"
        for k in SETTINGS_WATCHED
        if k in baseline.settings and k in candidate.settings and baseline.settings[k] != candidate.settings[k]
    ]
    for task, drop in baseline.tasks.items():
        other = candidate.tasks.get(task)
        if other is None:
            continue
        for k in TASK_WATCHED:
            before, after = getattr(drop, k, None), getattr(other, k, None)
            if before != after and not (k == "version" and None in (before, after)):
                notes.append(f"{task}: {k} differs: baseline {before!r}, candidate {after!r}")
    return notes


def _baseline_score_rule(task: str, name: str, base: MetricDrop, cand: MetricDrop, max_drop: float) -> RuleResult:
    worse = _worsening(base.baseline, cand.baseline, base.higher_is_better)
    direction = "higher" if base.higher_is_better else "lower"
    message = (
        f"{name} {cand.baseline:.4f} vs {base.baseline:.4f} in the baseline ({direction} is better; "
        f"{change_text(worse, 'worse', 'better')}, allowed worse by ≤ {max_drop:g})"
    )
    return RuleResult(
        "prune_drop",
        "baseline_score",
        f"{task}/{name}",
        f"full-model score may get worse by ≤ {max_drop:g}",
        {"max_drop": max_drop, "higher_is_better": base.higher_is_better},
        base.baseline,
        cand.baseline,
        worse,
        max_drop,
        within(worse, max_drop),
        message,
        worse_if=_worse_if(base.higher_is_better),
    )


def _layer_delta_rule(task: str, name: str, base: MetricDrop, cand: MetricDrop, factor: float) -> RuleResult:
    """ΔP(l) of the candidate vs the baseline, layer by layer over the layers both evaluated.

    "Worse" is sign-aware: for a higher-is-better metric, a more negative ΔP (removing the block costs
    more) is worse. Allowed: factor × sqrt(se_base² + se_cand²), where se is each model's *paired*
    stderr of ΔP(l) (`delta_stderr`: per-document differences, so the shared document noise cancels).
    The two models are scored independently, so their paired stderrs add in quadrature. When either
    file predates paired stderrs, the pruned scores' own stderrs are used (the unpaired fallback,
    several times wider), and the rule says so.
    """
    paired = base.paired and cand.paired
    before, after = _by_layer(base, task, "baseline", paired), _by_layer(cand, task, "candidate", paired)
    shared = sorted(set(before) & set(after))
    if not shared:
        raise ResultError(
            f"{task}: no layer was evaluated in both the baseline and the candidate.",
            hint="Run prune-drop on both with the same --layers.",
        )
    rows = []
    missing: dict[str, list[int]] = {"baseline": [], "candidate": []}
    for layer in shared:
        (b_delta, b_se), (c_delta, c_se) = before[layer], after[layer]
        for role, se in (("baseline", b_se), ("candidate", c_se)):
            if se is None:
                missing[role].append(layer)
        worse = _worsening(b_delta, c_delta, base.higher_is_better)
        allowed = factor * math.hypot(b_se or 0.0, c_se or 0.0)
        rows.append(
            {
                "layer": layer,
                "baseline_delta": b_delta,
                "candidate_delta": c_delta,
                "worsening": worse,
                "allowed": allowed,
                "passed": within(worse, allowed),
            }
        )
    worst = max(rows, key=lambda r: math.inf if math.isnan(r["worsening"]) else r["worsening"] - r["allowed"])
    failed = [r for r in rows if not r["passed"]]
    if failed:
        message = (
            f"removing layer(s) {[r['layer'] for r in failed]} costs more in the candidate than allowed; "
            f"worst: layer {worst['layer']} ΔP {worst['candidate_delta']:.4f} vs "
            f"{worst['baseline_delta']:.4f} (worse by {worst['worsening']:.4f} > {factor:g} × SE = "
            f"{worst['allowed']:.4f})"
        )
    else:
        message = (
            f"all {len(rows)} common layers within {factor:g} × SE; closest: layer {worst['layer']} "
            f"{change_text(worst['worsening'], 'worse', 'better')} (allowed worse by ≤ {worst['allowed']:.4f})"
        )
    for role, layers in missing.items():
        if layers:
            message += f"; {role} stderr missing for layers {layers}, counted as 0"
    if not paired:
        message += "; unpaired fallback: the pruned scores' own stderrs (no paired ΔP stderrs in a file)"
    stderr_kind = "paired ΔP stderrs" if paired else "pruned scores' stderrs (unpaired fallback)"
    if paired and (base.sequential or cand.sequential):
        stderr_kind += " (anytime 95 % interval half-width / 1.96 for a sequential run)"
    return RuleResult(
        "prune_drop",
        "layer_delta",
        f"{task}/{name}",
        f"ΔP(l) may get worse by ≤ {factor:g} × sqrt(se_base² + se_cand²) per layer, se = {stderr_kind}",
        {"se_factor": factor, "higher_is_better": base.higher_is_better},
        worst["baseline_delta"],
        worst["candidate_delta"],
        worst["worsening"],
        worst["allowed"],
        not failed,
        message,
        {
            "stderr": "paired" if paired else "unpaired",
            "common_layers": shared,
            "failed_layers": [r["layer"] for r in failed],
            "stderr_missing": missing,
            "layers": rows,
        },
        worse_if=_worse_if(base.higher_is_better),
    )


def _worsening(base: float, cand: float, higher_is_better: bool) -> float:
    """How much worse `cand` is than `base` (positive = worse); equal infinities are no change."""
    if base == cand:
        return 0.0
    return (base - cand) if higher_is_better else (cand - base)


def _worse_if(higher_is_better: bool) -> str:
    """Which sign of candidate − baseline counts against the candidate."""
    return "lower" if higher_is_better else "higher"


def _metric(result: PruneDropResult, task: str, name: str, role: str) -> MetricDrop:
    metrics = result.tasks[task].metrics
    if name not in metrics:
        raise ResultError(
            f"The {role} has no metric {name!r} for task {task!r} (it has {list(metrics)}).",
            hint="Name the metric to gate on with metric = ... in [prune_drop] of --rules.",
        )
    return metrics[name]


def _by_layer(metric: MetricDrop, task: str, role: str, paired: bool) -> dict[int, tuple[float, float | None]]:
    """Layer → (ΔP, its stderr): the paired `delta_stderr`, or with `paired` False the pruned score's own.

    A sequential run's variants (`delta_cs95`) get the stderr their anytime interval stands for, its
    half-width / 1.96: wider than the fixed-n one, because it holds however early the variant stopped.
    """
    errors = metric.delta_stderr if paired else metric.stderr
    if paired and metric.delta_cs95 is not None:
        errors = [None if cs is None else (cs[1] - cs[0]) / 2 / Z95 for cs in metric.delta_cs95]
    if errors is None or not len(metric.layers) == len(metric.pruned) == len(errors):
        raise ResultError(f"Malformed {role} result: {task} has layers, pruned and stderr of different lengths.")
    return {layer: (delta, se) for layer, delta, se in zip(metric.layers, metric.delta, errors, strict=True)}
