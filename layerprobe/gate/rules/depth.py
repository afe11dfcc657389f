"""The `compare` rules for depth.json: residual growth across the stack, and an unchanged norm placement.

- `rms_growth`: g = mean RMS(x^L) / mean RMS(x^0) is how much the residual stream grows through the
  stack (the Curse of Depth's symptom). The candidate fails when g_cand / g_base > `max_rms_growth`,
  i.e. its stream grows by more than that factor beyond the baseline's.
- `placement`: the traced placement of every block must be the same (a fine-tune or a merge that
  changes where normalisation sits is a different architecture, whatever its scores). A pruned
  checkpoint's blocks are paired with the source blocks it kept (`block_pairs`), never by count.
Both recompute from the stored per-block values, never from the summary block.
"""

from __future__ import annotations

import math
from collections import Counter

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
    pairs, how = block_pairs(baseline, candidate)
    before, after = baseline.placement.labels, candidate.placement.labels
    details: dict[str, object] = {
        "baseline": baseline.placement.summary,
        "candidate": candidate.placement.summary,
        "matched_by": how,
    }
    changed: list[int] = []
    extra: dict[str, int] = {}
    if pairs is not None:
        changed = [c for b, c in pairs if before[b] != after[c]]
        details["block_pairs"] = [[b, c] for b, c in pairs]
    else:  # no mapping: each label may occur in the smaller model at most as often as in the larger one
        extra = _extra_labels(before, after)
        details["labels_not_in_larger"] = extra
    details["changed_blocks"] = changed
    count = len(changed) + sum(extra.values())
    passed = count == 0
    where = _matching_text(baseline, candidate, how)
    if passed:
        message = f"placement unchanged{where}: {candidate.placement.summary}"
    else:
        message = f"placement changed{where}: {baseline.placement.summary!r} → {candidate.placement.summary!r}"
        if changed:
            message += f" (candidate blocks {changed})"
        else:
            message += " (" + ", ".join(f"{n} more {label}" for label, n in extra.items()) + " than the larger has)"
    return RuleResult(
        "depth",
        "placement",
        None,
        "per-block norm placement must not change",
        {},
        None,  # labels are not numbers: they are in `details` and the message
        None,
        float(count),
        0.0,
        passed,
        message,
        details,
    )


def block_pairs(baseline: DepthResult, candidate: DepthResult) -> tuple[list[tuple[int, int]] | None, str]:
    """Which baseline block each candidate block is: (baseline l, candidate l) pairs, and how they were found.

    - `"index"`: both have L blocks and neither was pruned from the other: block l is block l.
    - `"pruned_from"`: one is a checkpoint exported from a model of the other's L, and its depth.json
      records the source blocks it kept (`placement.pruned_from`): pruned block l is source block
      `kept_blocks[l]`.
    - `"multiset"` (pairs None): the block counts differ and no mapping is recorded (a depth.json written
      before it was, or a model pruned by other tools), so the labels are compared as multisets.
    """
    base, cand = baseline.placement, candidate.placement
    if cand.pruned_from is not None and cand.pruned_from.num_layers == len(base.blocks):
        return [(source, l) for l, source in enumerate(cand.pruned_from.kept_blocks)], "pruned_from"
    if base.pruned_from is not None and base.pruned_from.num_layers == len(cand.blocks):
        return [(l, source) for l, source in enumerate(base.pruned_from.kept_blocks)], "pruned_from"
    if len(base.blocks) == len(cand.blocks):
        return [(l, l) for l in range(len(base.blocks))], "index"
    return None, "multiset"


def _extra_labels(before: list[str], after: list[str]) -> dict[str, int]:
    """Labels the smaller model has more often than the larger one (by label, in order of first use)."""
    small, large = (after, before) if len(after) <= len(before) else (before, after)
    counts = Counter(large)
    extra: dict[str, int] = {}
    for label in small:
        if counts[label] > 0:
            counts[label] -= 1
        else:
            extra[label] = extra.get(label, 0) + 1
    return extra


def _matching_text(baseline: DepthResult, candidate: DepthResult, how: str) -> str:
    """How the blocks were paired, as a parenthesis for the message ("" for the plain same-L case)."""
    if how == "index":
        return ""
    if how == "pruned_from":
        return " (each pruned block against the source block it was kept from)"
    return (
        f" (L = {baseline.num_layers} vs {candidate.num_layers} and no record of which blocks were kept: "
        "labels compared as multisets)"
    )
