"""A binomial proportion and its interval: the flip rate of a variant's answers (the share that changed).

The Wilson (1927) score interval: the set of p whose score test |k/n − p| / sqrt(p (1 − p) / n) ≤ z accepts
the observed k of n. Unlike the Wald interval k/n ± z sqrt(p̂ (1 − p̂) / n) it never leaves [0, 1], is not
degenerate at 0 or n flips (0 of 50 flips still has an upper end of about 0.07), and its coverage stays
close to nominal down to small n (Brown, Cai & DasGupta 2001), which is where generation tasks with a
`--limit` live.
"""

from __future__ import annotations

import math

from layerprobe.core import PROPORTION_METRICS

Z95 = 1.959963984540054


def wilson_interval(successes: int, trials: int, z: float = Z95) -> tuple[float, float] | None:
    """The Wilson score interval of successes / trials (95 % by default); None without trials.

    centre = (k + z²/2) / (n + z²), half-width = z sqrt(k (n − k) / n + z²/4) / (n + z²).
    """
    if trials <= 0:
        return None
    if not 0 <= successes <= trials:
        raise ValueError(f"successes must lie in 0 … {trials}, got {successes}")
    z2 = z * z
    centre = (successes + z2 / 2) / (trials + z2)
    half = z * math.sqrt(successes * (trials - successes) / trials + z2 / 4) / (trials + z2)
    return max(0.0, centre - half), min(1.0, centre + half)


# Metrics that are the share of 0/1 answers (lm-eval's names): their score gets Wilson's interval.


def score_interval95(
    metric: str, value: float, stderr: float | None, documents: int | None
) -> tuple[float, float] | None:
    """A score's 95 % interval: Wilson's for a share of correct answers, else value ± 1.96 stderr.

    An accuracy is k right of n; ± 1.96 SE can reach below 0 or above 1 for a few documents or an
    accuracy near either end (3 of 15 gives [-0.01, 0.41]; 0 of 10 gives [0, 0]), Wilson's cannot. It is
    used when `metric` (before any ",filter") is a share of 0/1 answers and `value` is exactly k / n for
    the n = `documents` scored; None where neither interval exists.
    """
    right = value * documents if documents else math.nan
    if metric.split(",")[0] in PROPORTION_METRICS and math.isfinite(right) and abs(right - round(right)) < 1e-6:
        return wilson_interval(round(right), documents or 0)
    if stderr is None or not math.isfinite(stderr):
        return None
    return value - Z95 * stderr, value + Z95 * stderr
