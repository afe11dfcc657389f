"""The `compare` rule for heal.json: the healed model stays within a margin of its own original.

`heal_gap` is a non-inferiority check on the candidate's held-out comparison (heal.json pairs the
original and the healed model window by window): the gap is how much worse the healed model is than the
original on `heal_metric` (healed − original for nll and kl, original − healed for top-1 agreement),
and its one-sided 95 % upper bound, gap + 1.645 · paired stderr, must be at most `max_heal_gap`. The
baseline's own bound is shown beside it for reference; only the candidate is gated (a heal's quality is
a property of one run, the baseline tells whether it moved). Without `max_heal_gap` the kind has no rule
and says so in a note.
"""

from __future__ import annotations

from layerprobe.gate.rules.record import RuleResult, data_notes, within
from layerprobe.results import HealResult

Z95_ONE_SIDED = 1.6448536269514722  # one-sided 95 % quantile of the standard normal


def heal_gap_bound(result: HealResult, metric: str) -> tuple[float, float | None]:
    """The healed model's gap to its original on `metric` (positive: worse) and its one-sided 95 % upper bound."""
    entry = result.metrics[metric]
    delta = entry["healed_delta"]  # healed − original, paired over held-out windows
    gap = -delta["value"] if entry["higher_is_better"] else delta["value"]
    stderr = delta["stderr"]
    return gap, (gap + Z95_ONE_SIDED * stderr if stderr is not None else None)


def heal_rules(baseline: HealResult, candidate: HealResult, margin: float | None, metric: str) -> list[RuleResult]:
    """`heal_gap` on the candidate when a margin is set (see the module docstring); none otherwise."""
    if margin is None:
        return []
    gap, bound = heal_gap_bound(candidate, metric)
    base_bound = heal_gap_bound(baseline, metric)[1]
    passed = bound is not None and within(bound, margin)
    shown = "no interval (one held-out window)" if bound is None else f"{bound:.4g}"
    message = (
        f"healed model vs its original on held-out {metric}: gap {gap:.4g}, one-sided 95 % upper bound "
        f"{shown} (allowed ≤ {margin:g})"
    )
    return [
        RuleResult(
            "heal",
            "heal_gap",
            metric,
            f"the healed model's held-out {metric} stays within {margin:g} of the original (one-sided 95 % bound)",
            {"max_heal_gap": margin},
            base_bound,
            bound,
            bound if bound is not None else float("nan"),
            margin,
            passed,
            message,
            {"gap": gap, "method": candidate.method, "removed": candidate.removed},
            worse_if="higher",
        )
    ]


def heal_notes(baseline: HealResult, candidate: HealResult, margin: float | None) -> list[str]:
    """Data differences, a method or cut that differs, and a reminder when no margin is set."""
    notes = data_notes(baseline.data, candidate.data)
    if baseline.method != candidate.method or baseline.removed != candidate.removed:
        notes.append(
            f"heal differs: baseline {baseline.method} removing {baseline.removed}, "
            f"candidate {candidate.method} removing {candidate.removed}"
        )
    if margin is None:
        notes.append("heal: no rule applied; set --max-heal-gap (or [heal] max_heal_gap) to gate the healed model")
    return notes
