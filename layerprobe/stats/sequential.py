"""Anytime-valid confidence sequences for the mean of a bounded paired difference.

A sequential prune-drop scores documents in a seeded random order, in rounds, and after each round asks
of every variant whether its paired ΔP is known well enough to stop scoring it. An interval that is
re-checked after every round must hold at *all* rounds at once, or the repeated looks make its real
coverage far lower than its nominal 95 %. A confidence sequence (C_t) does: P(ΔP ∈ C_t for every t) ≥ 1 − α,
so the interval at any data-dependent stopping time covers ΔP with probability ≥ 1 − α.

The construction is the hedged-capital betting confidence sequence of Waudby-Smith & Ramdas (2023),
"Estimating means of bounded random variables by betting" (JRSS-B), in its sampling-WITHOUT-replacement
form (their §6), as implemented in their `confseq` package (`betting_mart` with the default predictable
mixture bets, truncation 1/2, θ = 1/2, intersected with the "logical" bounds). The differences d_i in a
known range [a, b] are mapped to x_i = (d_i − a)/(b − a) ∈ [0, 1]. For a candidate mean m of the N
documents, the mean of the documents not yet seen is μ_t(m) = (N m − S_{t−1})/(N − t + 1), and two
gamblers bet that x_t lies above / below it:

    K⁺_t(m) = Π_{i≤t} (1 + λ⁺_i(m) (x_i − μ_i(m))),   λ⁺_i(m) = min(λ_i, c / μ_i(m))
    K⁻_t(m) = Π_{i≤t} (1 − λ⁻_i(m) (x_i − μ_i(m))),   λ⁻_i(m) = min(λ_i, c / (1 − μ_i(m)))

with c = 1/2 and the predictable bets λ_i = sqrt(2 log(2/α) / (σ̂²_{i−1} i log(1 + i))) that use only
documents before i (σ̂² a running variance started at 1/4). Under the true m both are nonnegative
martingales starting at 1, so max(K⁺/2, K⁻/2) ≤ (K⁺ + K⁻)/2 is bounded by one, and by Ville's
inequality it reaches 1/α with probability ≤ α, ever. The
confidence sequence is {m : max(K⁺_t(m), K⁻_t(m)) / 2 < 1/α}; K⁺ is nonincreasing and K⁻ nondecreasing
in m, so it is an interval whose ends are found by bisection. Without replacement, μ_t(m) uses what was
already seen, so the interval collapses to the exact full-run mean when the documents run out.

The target is the finite-population mean of the N documents: exactly the ΔP a full run would report.

Everything is numpy on float64 and deterministic: the interval is a function of the differences and
their order; only `scoring_order` draws random numbers, from a seed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

DEFAULT_ALPHA = 0.05
TRUNCATION = 0.5  # c: the bets never risk more than half the capital (Waudby-Smith & Ramdas recommend 1/2)
STEPS = 24  # bisection steps: the ends to 2⁻²⁴ ≈ 6e-8 of the range, rounded outward; fixed, so a run's
# interval does not depend on which other runs are computed alongside it
STATE_KIND = "hedged_capital_wor"
StopReason = Literal["precision", "settled", "exhausted"]


def scoring_order(population: int, seed: int) -> np.ndarray:
    """The seeded random order in which the documents are scored: a permutation of 0 … population − 1.

    A uniformly random order makes the first t documents a simple random sample without replacement of
    the N, which is what the confidence sequence assumes. numpy's PCG64 makes the order reproducible.
    """
    return np.random.default_rng(seed).permutation(population)


def predictable_bets(x: np.ndarray, alpha: float) -> np.ndarray:
    """The predictable-mixture bets λ_i of Waudby-Smith & Ramdas (2023, eq. 26), one per observation.

    λ_i = sqrt(2 log(2/α) / (σ̂²_{i−1} · i · log(1 + i))) depends only on x_1 … x_{i−1} (which is what keeps
    the capital a martingale): σ̂²_t = (1/4 + Σ_{j≤t} (x_j − μ̂_j)²) / (t + 1) and μ̂_t = (1/2 + Σ_{j≤t} x_j)/(t + 1)
    shrink toward the variance and mean of a fair coin, so early bets are modest. The bet grows when the
    data vary little, which is what makes the interval narrow for differences that are mostly 0.

    Args:
        x: Observations on the [0, 1] scale, shape (..., t): the last axis is time.
        alpha: The level of the confidence sequence.

    Returns:
        Bets of the same shape, before truncation.
    """
    t = np.arange(1, x.shape[-1] + 1, dtype=np.float64)
    mean = np.minimum((0.5 + np.cumsum(x, axis=-1)) / (t + 1), 1.0)
    variance = (0.25 + np.cumsum((x - mean) ** 2, axis=-1)) / (t + 1)
    previous = np.concatenate([np.full(x.shape[:-1] + (1,), 0.25), variance[..., :-1]], axis=-1)
    return np.sqrt(2 * math.log(2 / alpha) / (t * np.log1p(t) * previous))


def _remaining_means(x: np.ndarray, m: np.ndarray, population: int | None) -> np.ndarray:
    """μ_i(m): the mean of the unseen documents before observation i if all N average m; shape (runs, t)."""
    if population is None:
        return np.broadcast_to(m[:, None], x.shape)
    t = np.arange(1, x.shape[-1] + 1, dtype=np.float64)
    seen_before = np.cumsum(x, axis=-1) - x
    return np.clip((population * m[:, None] - seen_before) / (population - t + 1), 0.0, 1.0)


def log_capital(x: np.ndarray, bets: np.ndarray, m: np.ndarray, population: int | None, side: int) -> np.ndarray:
    """The log capital, log K⁺_t(m) (side = +1) or log K⁻_t(m) (side = −1), after all t observations, per run.

    Args:
        x: Observations on [0, 1], shape (runs, t).
        bets: `predictable_bets(x)`, shape (runs, t).
        m: Candidate population mean per run, shape (runs,). It must lie within the logical bounds of
            `logical_bounds` (else μ_i(m) is clipped to [0, 1] and the value is meaningless).
        population: N for sampling without replacement, None for sampling with replacement.
        side: +1 for the gambler betting on "above m", −1 for "below m".
    """
    mu = _remaining_means(x, m, population)
    room = mu if side > 0 else 1.0 - mu
    with np.errstate(divide="ignore"):
        bet = np.minimum(bets, TRUNCATION / room)
    return np.log1p(side * bet * (x - mu)).sum(axis=-1)


def logical_bounds(x: np.ndarray, population: int | None) -> tuple[np.ndarray, np.ndarray]:
    """The bounds every observation in [0, 1] implies by itself: the unseen documents lie in [0, 1].

    After t of N documents with sum S_t, the population mean lies in [S_t / N, (S_t + N − t) / N]; with
    replacement (N unknown) only [0, 1] is known. Shapes: x (runs, t) → two (runs,) arrays.
    """
    runs = x.shape[0]
    if population is None:
        return np.zeros(runs), np.ones(runs)
    total = x.sum(axis=-1)
    return total / population, (total + population - x.shape[-1]) / population


def _crossing(
    x: np.ndarray, bets: np.ndarray, lo: np.ndarray, hi: np.ndarray, population: int | None, side: int, alpha: float
) -> np.ndarray:
    """Where the side's capital crosses 2/α between lo and hi, rounded outward (toward excluded points).

    K⁺ falls with m, so the lower end is the last m where K⁺/2 ≥ 1/α; K⁻ rises with m, so the upper end is
    the first m where K⁻/2 ≥ 1/α. Bisection keeps [excluded, included] brackets for all runs at once.
    """
    threshold = math.log(2 / alpha)  # θ = 1/2: K/2 ≥ 1/α  ⇔  log K ≥ log(2/α)
    outer, inner = (lo.copy(), hi.copy()) if side > 0 else (hi.copy(), lo.copy())
    inside = log_capital(x, bets, outer, population, side) < threshold
    inner_out = log_capital(x, bets, inner, population, side) >= threshold
    for _ in range(STEPS):
        middle = (outer + inner) / 2
        excluded = log_capital(x, bets, middle, population, side) >= threshold
        outer = np.where(excluded, middle, outer)
        inner = np.where(excluded, inner, middle)
    # the logical bound itself is not excluded: nothing to search; all excluded: the end is the far bound
    outer = np.where(inside, lo if side > 0 else hi, outer)
    return np.where(inner_out & ~inside, hi if side > 0 else lo, outer)


def confidence_interval(
    differences: np.ndarray,
    *,
    low_bound: float,
    high_bound: float,
    population: int | None,
    alpha: float = DEFAULT_ALPHA,
) -> tuple[np.ndarray, np.ndarray]:
    """The confidence sequence's interval after the observations so far, for many runs at once.

    This is the set {m : max(K⁺_t(m), K⁻_t(m)) / 2 < 1/α} intersected with the logical bounds, on the
    scale of the differences, widened where needed to contain the running mean (the betting set can
    miss it by a hair when early and late documents differ; a wider interval keeps its coverage, and a
    reported interval should contain its own point estimate). An empty set (possible with probability
    ≤ α) is likewise reported as the span between its two crossing points. The interval depends on the
    order of the observations (the bets are predictable) but not on how they were grouped into rounds.

    Args:
        differences: Paired differences d in [low_bound, high_bound], shape (runs, t) in scoring order
            (t ≥ 1).
        low_bound: a, the smallest value a difference can take (−1 for accuracy-type metrics).
        high_bound: b, the largest (+1 for accuracy-type metrics).
        population: N, the number of documents sampled without replacement; None for an endless stream.
        alpha: 1 − the coverage.

    Returns:
        (low, high), two arrays of shape (runs,).
    """
    d = np.asarray(differences, dtype=np.float64)
    if d.ndim != 2 or d.shape[1] == 0:
        raise ValueError(f"differences must have shape (runs, t) with t ≥ 1, not {d.shape}")
    span = high_bound - low_bound
    x = np.clip((d - low_bound) / span, 0.0, 1.0)
    bets = predictable_bets(x, alpha)
    lo, hi = logical_bounds(x, population)
    low = _crossing(x, bets, lo, hi, population, +1, alpha)
    high = _crossing(x, bets, lo, hi, population, -1, alpha)
    low, high = low_bound + span * low, low_bound + span * high
    mean = d.mean(axis=-1)
    return np.minimum.reduce([low, high, mean]), np.maximum.reduce([low, high, mean])


@dataclass
class ConfidenceSequence:
    """The running 95 % confidence sequence of one variant's mean paired difference, updated per round.

    `update` appends a round's differences (in scoring order) and returns `confidence_interval` of all
    differences so far: a function of the documents and their order only, so one round of 20 and twenty
    rounds of one give the same interval. (Intersecting with earlier intervals would also be valid and
    make the width monotone, but would tie the interval to when the looks happened.)
    `to_dict`/`from_dict` round-trip the state exactly (for resuming a run).

    Attributes:
        low_bound: a, the smallest possible difference.
        high_bound: b, the largest possible difference.
        population: N, the number of documents (None: sampling with replacement from an endless stream).
        alpha: 1 − the coverage.
        differences: Every difference seen so far, in scoring order.
        interval: The current (low, high), or None before the first document.
        looks: How many times `update` was called with documents.
    """

    low_bound: float = -1.0
    high_bound: float = 1.0
    population: int | None = None
    alpha: float = DEFAULT_ALPHA
    differences: list[float] = field(default_factory=list)
    interval: tuple[float, float] | None = None
    looks: int = 0

    def __post_init__(self) -> None:
        if not self.high_bound > self.low_bound:
            raise ValueError(f"the range of the differences is empty: [{self.low_bound}, {self.high_bound}]")
        if not 0 < self.alpha < 1:
            raise ValueError(f"alpha must lie in (0, 1), not {self.alpha}")
        if self.population is not None and self.population < 1:
            raise ValueError(f"the population must hold at least one document, not {self.population}")

    @property
    def seen(self) -> int:
        """Number of documents scored so far."""
        return len(self.differences)

    @property
    def mean(self) -> float | None:
        """The running mean of the differences (the point estimate of ΔP), None before any document."""
        return float(np.mean(self.differences)) if self.differences else None

    @property
    def half_width(self) -> float:
        """Half the width of the current interval (the range's half-width before any document)."""
        low, high = self.interval or (self.low_bound, self.high_bound)
        return (high - low) / 2

    def update(self, batch: Sequence[float] | np.ndarray) -> tuple[float, float]:
        """Add one round of differences (in scoring order) and return the new interval (low, high)."""
        values = [float(v) for v in np.asarray(batch, dtype=np.float64).ravel()]
        for value in values:
            if not self.low_bound <= value <= self.high_bound:
                raise ValueError(f"difference {value} outside its declared range [{self.low_bound}, {self.high_bound}]")
        if self.population is not None and self.seen + len(values) > self.population:
            raise ValueError(f"more documents than the population of {self.population}")
        if not values:
            return self.interval or (self.low_bound, self.high_bound)
        self.differences.extend(values)
        lows, highs = confidence_interval(
            np.asarray([self.differences]),
            low_bound=self.low_bound,
            high_bound=self.high_bound,
            population=self.population,
            alpha=self.alpha,
        )
        self.interval = (float(lows[0]), float(highs[0]))
        self.looks += 1
        return self.interval

    def stop(self, half_width: float | None, *, settle: bool = True) -> StopReason | None:
        """`stop_reason` for this variant's current interval (None before the first document)."""
        if self.interval is None:
            return None
        return stop_reason(
            self.interval, half_width=half_width, seen=self.seen, population=self.population, settle=settle
        )

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict that `from_dict` turns back into an identical state."""
        return {
            "kind": STATE_KIND,
            "low_bound": self.low_bound,
            "high_bound": self.high_bound,
            "population": self.population,
            "alpha": self.alpha,
            "differences": list(self.differences),
            "interval": None if self.interval is None else list(self.interval),
            "looks": self.looks,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ConfidenceSequence:
        """Rebuild a state written by `to_dict`."""
        if data.get("kind") != STATE_KIND:
            raise ValueError(f"not a {STATE_KIND} state: kind {data.get('kind')!r}")
        interval = data["interval"]
        return cls(
            low_bound=float(data["low_bound"]),
            high_bound=float(data["high_bound"]),
            population=None if data["population"] is None else int(data["population"]),
            alpha=float(data["alpha"]),
            differences=[float(v) for v in data["differences"]],
            interval=None if interval is None else (float(interval[0]), float(interval[1])),
            looks=int(data["looks"]),
        )


def stop_reason(
    interval: tuple[float, float], *, half_width: float | None, seen: int, population: int | None, settle: bool = True
) -> StopReason | None:
    """Whether a variant may stop being scored, and why; None to go on.

    - "exhausted": every document has been scored; the interval is then the exact full-run ΔP.
    - "precision": the half-width is at most the target H (`half_width`; None disables the rule).
    - "settled": the interval excludes 0, so the sign of ΔP is known (only with `settle`).

    The rules are checked in that order. Stopping on any of them keeps the coverage because the
    confidence sequence holds at every look at once; the point estimate after a "settled" stop is biased
    away from 0 (stopping early on large effects), so report the interval, not only the mean.
    """
    if population is not None and seen >= population:
        return "exhausted"
    low, high = interval
    if half_width is not None and (high - low) / 2 <= half_width:
        return "precision"
    if settle and (low > 0 or high < 0):
        return "settled"
    return None
