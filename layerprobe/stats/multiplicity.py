"""p-values for paired estimates, and their adjustment over many variants × tasks × metrics.

A prune-drop over 32 blocks × 3 tasks × 2 metrics asks 192 questions; at 5 % each, about ten "significant"
drops are expected by chance alone. Two standard corrections:

- Holm (1979) step-down: controls the family-wise error rate (the chance of even one false claim) at α
  for any dependence between the tests, and is uniformly more powerful than Bonferroni.
- Benjamini & Hochberg (1995): controls the false discovery rate (the expected share of false claims
  among the claims) at α for independent or positively dependent tests, which paired drops of blocks of
  one model on the same documents plausibly are. Less strict, so more claims survive.

Adjusted p-values are reported (rather than yes/no at one α) so that a reader can apply any level: a
hypothesis is rejected at level α exactly when its adjusted p-value is ≤ α. p-values that are missing
(None or NaN, e.g. a metric without a standard error) are left out of the family, and reported as left
out, so they neither count toward m nor get a value.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, cast

import numpy as np

from layerprobe.core import MULTIPLICITY_METHODS

Method = Literal["holm", "bh", "none"]
METHODS = cast(tuple[Method, ...], MULTIPLICITY_METHODS)  # the choices have one home: core/defaults.py


@dataclass(frozen=True)
class Adjusted:
    """Adjusted p-values aligned with the input.

    Attributes:
        method: "holm" (family-wise error), "bh" (false discovery rate) or "none" (unadjusted).
        pvalues: One per input p-value, in the input order; None where the input was missing.
        tested: m, the number of p-values in the family (the inputs that were present).
        left_out: Indices of the inputs that were missing (None or NaN) and so left out.
    """

    method: str
    pvalues: tuple[float | None, ...]
    tested: int
    left_out: tuple[int, ...]

    def rejected(self, alpha: float = 0.05) -> tuple[bool | None, ...]:
        """Which hypotheses are rejected at level alpha (adjusted p ≤ alpha); None for left-out ones."""
        return tuple(None if p is None else p <= alpha for p in self.pvalues)


def adjust_pvalues(pvalues: Sequence[float | None], method: str = "holm") -> Adjusted:
    """Holm or Benjamini–Hochberg adjusted p-values of a family of tests, missing values left out.

    With the m present p-values sorted ascending, p_(1) ≤ … ≤ p_(m):

    - Holm: p̃_(i) = max_{j ≤ i} min(1, (m − j + 1) p_(j))  (the running max keeps the step-down order).
    - BH:   p̃_(i) = min_{j ≥ i} min(1, m p_(j) / j)         (the running min from the top: step-up).
    - none: p̃_(i) = p_(i).

    Args:
        pvalues: p-values in any order, shape (k,); None or NaN where no test could be made.
        method: "holm", "bh" or "none".

    Raises:
        ValueError: For an unknown method or a p-value outside [0, 1].
    """
    if method not in METHODS:
        raise ValueError(f"unknown multiplicity method {method!r}; choose one of {', '.join(METHODS)}")
    present = [i for i, p in enumerate(pvalues) if p is not None and not math.isnan(p)]
    left_out = tuple(sorted(set(range(len(pvalues))) - set(present)))
    values = np.array([pvalues[i] for i in present], dtype=np.float64)
    if np.any((values < 0) | (values > 1)):
        raise ValueError("p-values must lie in [0, 1]")
    m = len(values)
    order = np.argsort(values, kind="stable")
    ranked = values[order]
    if method == "holm":
        ranked = np.maximum.accumulate(np.minimum(1.0, (m - np.arange(m)) * ranked))
    elif method == "bh":
        ranked = np.minimum.accumulate(np.minimum(1.0, m * ranked / np.arange(1, m + 1))[::-1])[::-1]
    adjusted = np.empty(m)
    adjusted[order] = ranked
    out: list[float | None] = [None] * len(pvalues)
    for index, value in zip(present, adjusted, strict=True):
        out[index] = float(value)
    return Adjusted(method, tuple(out), m, left_out)


def normal_pvalue(delta: float, stderr: float | None) -> float | None:
    """Two-sided p-value of "the true difference is 0" from a point estimate and its standard error.

    p = 2 · (1 − Φ(|delta| / stderr)): the Wald test that matches the normal 95 % interval
    delta ± 1.96 stderr of `paired_mean_stats` (p < 0.05 exactly when that interval excludes 0). A zero
    stderr (every document moved by the same amount) gives p = 0 for a nonzero delta and 1 for delta = 0.

    Returns:
        None where no stderr exists (fewer than two documents) or either number is not finite.
    """
    if stderr is None or not (math.isfinite(delta) and math.isfinite(stderr)) or stderr < 0:
        return None
    from scipy import stats

    if stderr == 0:
        return 1.0 if delta == 0 else 0.0
    return float(2 * stats.norm.sf(abs(delta) / stderr))


def bootstrap_pvalue(delta: float, draws: Sequence[float] | np.ndarray) -> float | None:
    """Two-sided bootstrap p-value of "the true difference is 0" (the percentile-interval test).

    The share of bootstrap differences on the other side of 0 from the point estimate (0 itself counted
    as the other side), with the +1 correction of Davison & Hinkley (1997, §4.4) so a finite number of
    draws never claims p = 0, doubled for two sides and capped at 1:

        p = min(1, 2 (1 + #{draws on the other side of 0}) / (B + 1))

    p ≤ 0.05 then goes with the 95 % percentile interval excluding 0 (up to the +1). For delta = 0 the
    estimate sits on the null: p = 1.

    That formula cannot go below 2/(B+1) (0.002 for 1,000 draws) and moves in steps of 2/(B+1): Holm
    over a run's family (36 tests) lifts the floor to 0.07, "not significant" for any effect. Where fewer
    than `RESOLVED_TAIL` (10) draws lie on the other side, the tail is read instead from the normal
    distribution with the bootstrap's own standard error, p = 2 Φ(−|delta| / sd(draws)): as small as the
    effect is large (docs/methods.md; its level and power checked by simulation in
    tests/stats/test_multiplicity.py). Above that the percentile p-value stands (p > 0.02 there).

    Args:
        delta: The point estimate on the full sample (decides which side is "other").
        draws: The B bootstrap differences, shape (B,); non-finite draws are dropped.

    Returns:
        None with fewer than two finite draws or a non-finite delta.
    """
    values = np.asarray(draws, dtype=np.float64)
    values = values[np.isfinite(values)]
    if len(values) < 2 or not math.isfinite(delta):
        return None
    if delta == 0:
        return 1.0
    other = int(np.sum(values <= 0)) if delta > 0 else int(np.sum(values >= 0))
    p = min(1.0, 2 * (1 + other) / (len(values) + 1))
    if other < RESOLVED_TAIL:  # beyond the draws' resolution: the normal tail of the bootstrap SE
        spread = float(np.std(values, ddof=1))
        refined = normal_pvalue(delta, spread) if spread > 0 else None
        if refined is not None:
            p = refined
    return p


# Fewer draws than this beyond 0 and the percentile p-value (≤ 2·11/(B+1) = 0.022 for 1,000 draws) is
# too coarse for a multiplicity adjustment: the bootstrap SE's normal tail is used instead.
RESOLVED_TAIL = 10
