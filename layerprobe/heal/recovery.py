"""The share of the cut's cost a heal wins back, with a paired bootstrap interval over held-out windows.

recovery = (P_healed − P_pruned) / (P_original − P_pruned), each P the mean of a per-window value. The
interval resamples the windows with replacement (the three models' values of one window stay together,
so the ratio's numerator and denominator move as they do in the data) and takes the 2.5 and 97.5
percentiles of the draws' ratios, widened to contain the estimate. A ratio of means has no closed-form
stderr that holds when the denominator is small; the bootstrap needs none. When the cut's own cost is
not measurable (the paired 95 % interval of P_original − P_pruned includes 0), the ratio divides by
noise: it is reported as not defined, with the reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from layerprobe.core import DEFAULT_DRAWS, DEFAULT_SEED
from layerprobe.stats import PairedDelta, paired_mean_stats


@dataclass(frozen=True)
class Recovery:
    """The recovery estimate and its interval (None when not defined, `reason` saying why)."""

    value: float | None
    ci95: tuple[float, float] | None
    gap: PairedDelta  # P_original − P_pruned, paired
    reason: str | None = None
    draws: int = DEFAULT_DRAWS
    seed: int = DEFAULT_SEED

    @property
    def defined(self) -> bool:
        return self.value is not None


def recovery(
    original: Sequence[float],
    pruned: Sequence[float],
    healed: Sequence[float],
    draws: int = DEFAULT_DRAWS,
    seed: int = DEFAULT_SEED,
) -> Recovery:
    """Recovery of the healed model from per-window values of the three models (same windows, same order)."""
    o, p, h = (np.asarray(x, dtype=np.float64) for x in (original, pruned, healed))
    gap = paired_mean_stats(p.tolist(), o.tolist())  # o − p
    if gap.ci95 is None or gap.ci95[0] <= 0 <= gap.ci95[1]:
        shown = "no interval (one window)" if gap.ci95 is None else f"[{gap.ci95[0]:.4g}, {gap.ci95[1]:.4g}]"
        reason = f"the cut costs nothing measurable: the 95 % interval of P_original − P_pruned is {shown}"
        return Recovery(None, None, gap, reason, draws, seed)
    won, lost = h - p, o - p
    value = float(won.mean() / lost.mean())
    rng = np.random.default_rng(seed)
    ratios = np.empty(draws)
    for draw in range(draws):
        index = rng.integers(0, len(o), len(o))
        denominator = lost[index].mean()
        ratios[draw] = won[index].mean() / denominator if denominator != 0 else np.nan
    finite = ratios[np.isfinite(ratios)]
    low, high = (float(np.percentile(finite, q)) for q in (2.5, 97.5)) if len(finite) else (value, value)
    return Recovery(value, (min(low, value), max(high, value)), gap, None, draws, seed)
