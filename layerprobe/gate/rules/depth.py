"""The `compare` rules for depth.json: residual growth across the stack, and an unchanged norm placement.

- `rms_growth`: g = mean RMS(x^L) / mean RMS(x^0) is how much the residual stream grows through the
  stack (the Curse of Depth's symptom). The candidate fails when g_cand / g_base > `max_rms_growth`,
  i.e. its stream grows by more than that factor beyond the baseline's.
- `placement`: the traced placement of every block must be the same (a fine-tune or a merge that
  changes where normalisation sits is a different architecture, whatever its scores).
Both recompute from the stored per-block values, never from the summary block.
"""

from __future__ import annotations

import math

from layerprobe.gate.rules.record import EPS, RuleResult, data_notes
from layerprobe.results import DepthResult


def rms_growth(result: DepthResult) -> float | None:
    """Mean RMS of x^L over mean RMS of x^0; None when either is missing or not positive."""
    first, last = result.rms.mean[0], result.rms.mean[-1]
    if not (math.isfinite(first) and math.isfinite(last)) or first <= 0:
        return None
    return last / first


def depth_rules(baseline: DepthResult, candidate: DepthResult, max_rms_growth: float) -> list[RuleResult]:
    """The two depth rules (see the module docstring)."""
    return [_growth_rule(baseline, candidate, max_rms_growth), _placement_rule(baseline, candidate)]


def depth_notes(baseline: DepthResult, candidate: DepthResult) -> list[str]:
    """What a reader must know before trusting the comparison: the two runs measured different data."""
    return data_notes(baseline.data, candidate.data)


def _growth_rule(baseline: DepthResult, candidate: DepthResult, factor: float) -> RuleResult:
    base, cand = rms_growth(baseline), rms_growth(candidate)
    ratio = None if base is None or cand is None or base == 0 else cand / base
    criterion = f"RMS(x^L)/RMS(x^0) may grow by ≤ {factor:g}× the baseline's"
    if ratio is None:
        message = "residual growth cannot be computed (missing or non-positive RMS)"
    else:
        message = (
            f"residual RMS grows {cand:.4g}× from x^0 to x^{candidate.num_layers} vs {base:.4g}× in the baseline "
            f"(ratio {ratio:.3f}, allowed ≤ {factor:g})"
        )
    return RuleResult(
        "depth",
        "rms_growth",
        None,
        criterion,
        {"max_rms_growth": factor},
        base,
        cand,
        ratio,
        factor,
        ratio is not None and ratio <= factor + EPS,
        message,
        worse_if="higher",
        scale="ratio",
    )


def _placement_rule(baseline: DepthResult, candidate: DepthResult) -> RuleResult:
    before, after = baseline.placement.labels, candidate.placement.labels
    changed = [l for l in range(min(len(before), len(after))) if before[l] != after[l]]
    passed = not changed and len(before) == len(after)
    details: dict[str, object] = {
        "baseline": baseline.placement.summary,
        "candidate": candidate.placement.summary,
        "changed_blocks": changed,
    }
    if passed:
        message = f"placement unchanged: {candidate.placement.summary}"
    else:
        message = f"placement changed: {baseline.placement.summary!r} → {candidate.placement.summary!r}"
        if changed:
            message += f" (blocks {changed})"
    return RuleResult(
        "depth",
        "placement",
        None,
        "per-block norm placement must not change",
        {},
        None,  # labels are not numbers: they are in `details` and the message
        None,
        float(len(changed) + abs(len(before) - len(after))),
        0.0,
        passed,
        message,
        details,
    )
