"""The `compare` rules for angular.json: lazy blocks, the mean adjacent distance, and each block's distance.

- `lazy_blocks`: the candidate may have at most `max_lazy_increase` more lazy blocks (d(x^l, x^(l+1)) <
  `lazy_threshold`) than the baseline.
- `mean_adjacent`: the mean adjacent distance may fall by at most `adjacent_tolerance`.
- `adjacent_distance` (when both files carry `distance_stderr`): each block's adjacent distance may fall
  by at most max(`adjacent_tolerance`, `se_factor` × its combined standard error).
All recompute from the distance matrices with the gate's threshold: the stored summary may have been
written with another.
"""

from __future__ import annotations

import math

from layerprobe.gate.rules.record import RuleResult, change_text, data_notes, within
from layerprobe.gate.rules.thresholds import GateRules
from layerprobe.results import AngularResult, angular_summary


def angular_rules(baseline: AngularResult, candidate: AngularResult, rules: GateRules) -> list[RuleResult]:
    """Lazy-block growth and the fall of the mean adjacent distance, each over each model's whole stack.

    Both are recomputed from the distance matrices with `rules.lazy_threshold`: the stored summary
    may have been written with another threshold.
    """
    threshold = rules.lazy_threshold
    base, cand = angular_summary(baseline.distance, threshold), angular_summary(candidate.distance, threshold)
    growth = cand["lazy_count"] - base["lazy_count"]
    new = sorted(set(cand["lazy_layers"]) - set(base["lazy_layers"]))
    lazy = RuleResult(
        "angular",
        "lazy_blocks",
        None,
        f"lazy blocks (d(x^l, x^l+1) < {threshold:g}) may grow by ≤ {rules.max_lazy_increase}",
        {"lazy_threshold": threshold, "max_lazy_increase": rules.max_lazy_increase},
        base["lazy_count"],
        cand["lazy_count"],
        growth,
        rules.max_lazy_increase,
        growth <= rules.max_lazy_increase,
        f"{cand['lazy_count']} of {candidate.num_layers} candidate blocks are lazy vs {base['lazy_count']} of "
        f"{baseline.num_layers} in the baseline ({growth:+d}, allowed +{rules.max_lazy_increase}); "
        f"candidate lazy blocks {cand['lazy_layers']}, baseline {base['lazy_layers']}",
        {
            "baseline_lazy_layers": base["lazy_layers"],
            "candidate_lazy_layers": cand["lazy_layers"],
            "newly_lazy_by_index": new,
            "nonfinite_adjacent": {"baseline": _nonfinite(base["adjacent"]), "candidate": _nonfinite(cand["adjacent"])},
        },
        worse_if="higher",
    )
    results = [lazy, _mean_adjacent_rule(base["mean_adjacent"], cand["mean_adjacent"], rules.adjacent_tolerance)]
    if baseline.distance_stderr is not None and candidate.distance_stderr is not None:
        results.append(
            _adjacent_distance_rule(
                baseline,
                candidate,
                baseline.distance_stderr,
                candidate.distance_stderr,
                rules.adjacent_tolerance,
                rules.se_factor,
            )
        )
    return results


def angular_notes(baseline: AngularResult, candidate: AngularResult) -> list[str]:
    """What a reader must know before trusting the comparison: a missing stderr, different data."""
    return _stderr_notes(baseline, candidate) + data_notes(baseline.data, candidate.data)


def _stderr_notes(baseline: AngularResult, candidate: AngularResult) -> list[str]:
    """Say so when a result has no `distance_stderr` (written before it existed): the no-stderr fallback."""
    missing = [
        role for role, result in (("baseline", baseline), ("candidate", candidate)) if result.distance_stderr is None
    ]
    if not missing:
        return []
    return [
        f"no distance_stderr in the {' and '.join(missing)} (written before stderrs existed): no-stderr fallback, "
        "rule adjacent_distance skipped; lazy_blocks and mean_adjacent use their absolute thresholds only"
    ]


def _mean_adjacent_rule(base: float | None, cand: float | None, tolerance: float) -> RuleResult:
    criterion = f"mean d(x^l, x^l+1) may fall by ≤ {tolerance:g}"
    fall = None if base is None or cand is None else base - cand
    if fall is None:
        side = "baseline" if base is None else "candidate"
        message = f"the {side} has no finite adjacent distance, so the mean cannot be compared"
    else:
        message = (
            f"mean adjacent distance {cand:.4f} vs {base:.4f} in the baseline ({change_text(fall, 'fell', 'rose')}, "
            f"may fall by ≤ {tolerance:g})"
        )
    return RuleResult(
        "angular",
        "mean_adjacent",
        None,
        criterion,
        {"adjacent_tolerance": tolerance},
        base,
        cand,
        fall,
        tolerance,
        fall is not None and within(fall, tolerance),
        message,
        worse_if="lower",
    )


def _adjacent_distance_rule(
    baseline: AngularResult,
    candidate: AngularResult,
    baseline_stderr: list[list[float]],
    candidate_stderr: list[list[float]],
    tolerance: float,
    factor: float,
) -> RuleResult:
    """d(x^l, x^(l+1)) block by block (matched by index): a fall counts only beyond its noise.

    Allowed fall at block l: max(tolerance, factor × sqrt(se_base² + se_cand²)), the two entries'
    standard errors from `distance_stderr`; the absolute tolerance is the floor, so a tiny stderr from a
    long corpus does not turn an irrelevant change into a failure. An unknown (NaN) stderr leaves the
    floor; an unmeasured (NaN) distance on one side cannot be verified and fails.
    """
    rows = []
    for layer in range(min(baseline.num_layers, candidate.num_layers)):
        before, after = baseline.distance[layer][layer + 1], candidate.distance[layer][layer + 1]
        se_before, se_after = baseline_stderr[layer][layer + 1], candidate_stderr[layer][layer + 1]
        noise = factor * math.hypot(se_before, se_after)
        allowed = max(tolerance, noise) if math.isfinite(noise) else tolerance
        fall = 0.0 if before == after else before - after
        rows.append(
            {
                "layer": layer,
                "baseline": before,
                "candidate": after,
                "baseline_stderr": se_before,
                "candidate_stderr": se_after,
                "fall": fall,
                "allowed": allowed,
                "passed": within(fall, allowed),
            }
        )
    worst = max(rows, key=lambda r: math.inf if math.isnan(r["fall"]) else r["fall"] - r["allowed"])
    failed = [r["layer"] for r in rows if not r["passed"]]
    if failed:
        message = (
            f"block(s) {failed} turn their input less in the candidate than allowed; worst: block "
            f"{worst['layer']} d(x^l, x^l+1) {worst['candidate']:.4f} vs {worst['baseline']:.4f} (fell by "
            f"{worst['fall']:.4f} > {worst['allowed']:.4f})"
        )
    else:
        message = (
            f"all {len(rows)} common blocks within max({tolerance:g}, {factor:g} × SE); closest: block "
            f"{worst['layer']} {change_text(worst['fall'], 'fell', 'rose')} (allowed fall ≤ {worst['allowed']:.4f})"
        )
    return RuleResult(
        "angular",
        "adjacent_distance",
        None,
        f"d(x^l, x^l+1) per block may fall by ≤ max({tolerance:g}, {factor:g} × combined SE)",
        {"adjacent_tolerance": tolerance, "se_factor": factor},
        worst["baseline"],
        worst["candidate"],
        worst["fall"],
        worst["allowed"],
        not failed,
        message,
        {"failed_layers": failed, "layers": rows},
        worse_if="lower",
    )


def _nonfinite(values: list[float]) -> list[int]:
    return [index for index, value in enumerate(values) if not math.isfinite(value)]
