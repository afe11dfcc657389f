"""How stable a per-block ranking is across calibration data.

Two runs of `angular` (or `prune-drop`) on different calibration corpora each give a score per block;
the question is whether they would prune the same blocks. Three measures, each with a bootstrap interval
that says how much of the disagreement is sampling noise of the calibration data itself:

- Kendall's τ-b and Spearman's ρ between the two score vectors: agreement of the whole ordering.
- The Jaccard overlap |A_k ∩ B_k| / |A_k ∪ B_k| of the k lowest-scoring blocks of each side (the ones a
  pruner removes first) for k = 1 … ⌊L/2⌋: agreement where it matters.

Intervals come from redrawing each side's per-block scores and recomputing the statistic:

- "bootstrap": where the per-window (or per-document) values behind each side's scores exist, the windows
  of each side are resampled with replacement, independently of the other side (the two runs saw
  different data), and each block's score is recomputed as the mean over the drawn windows (weighted by
  each window's measured positions where windows differ in size: the ratio estimator's bootstrap). A
  window's values for all blocks are drawn together, keeping their correlation.
- "parametric_bootstrap": where only each block's mean and standard error exist, each block's score is
  drawn from N(mean, se²), blocks independently (their correlation is unknown, so the interval is only
  approximate).
- "mixed_bootstrap": one side of each kind.

Percentile 95 % intervals, widened to hold the point value (τ = 1 of two identical orderings lies above
every noisy draw's τ); seeded (numpy PCG64), so a result is reproducible. `lowest_k_jaccard_chance` gives
the overlap two unrelated rankings would have, the floor to read a Jaccard curve against. Unlike
`spearman_bootstrap` in stats/paired.py, which resamples the (block, block) pairs of one result, these
resample the data each result was measured on.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from layerprobe.stats.paired import DEFAULT_DRAWS, DEFAULT_SEED, holding

CHUNK = 128  # draws handled at once: bounds the (draws, pairs) and (draws, windows) arrays
Interval = tuple[float, float]
TIE_BREAKS = 4096  # random tie-breaks the point Jaccard averages over (Monte Carlo error < 0.01)


@dataclass(frozen=True, eq=False)
class BlockScores:
    """One side's per-block scores, and what is known about their sampling noise.

    Build with `from_windows` (per-window values) or `from_normal` (means and standard errors).

    Attributes:
        point: The per-block score, shape (L,): the (weighted) mean over windows, or the given mean.
        windows: Per-window values, shape (n, L), or None.
        stderr: Per-block standard errors, shape (L,), or None.
        weights: Per-window weights, shape (n,) (a window's measured positions), or None: equal weights.
    """

    point: np.ndarray
    windows: np.ndarray | None = None
    stderr: np.ndarray | None = None
    weights: np.ndarray | None = None

    @classmethod
    def from_windows(
        cls,
        values: Sequence[Sequence[float]] | np.ndarray,
        weights: Sequence[float] | np.ndarray | None = None,
        point: Sequence[float] | np.ndarray | None = None,
    ) -> BlockScores:
        """Scores that are means over windows: `values[w][l]` is block l's value on window w, shape (n, L).

        Args:
            values: Per-window values, shape (n ≥ 2, L ≥ 2), finite.
            weights: Each window's weight (its measured positions), shape (n,), positive; None: equal. A
                block's score is then Σ_w weight_w · value_w / Σ_w weight_w, and each redraw the same
                ratio over the drawn windows.
            point: The scores as recorded, shape (L,), when the caller holds them already (a result file's
                numbers, which the weighted mean reproduces up to float rounding); None: the weighted mean.
        """
        array = np.asarray(values, dtype=np.float64)
        if array.ndim != 2 or array.shape[0] < 2 or array.shape[1] < 2:
            raise ValueError(f"per-window values need shape (windows ≥ 2, blocks ≥ 2), not {array.shape}")
        if not np.isfinite(array).all():
            raise ValueError("per-window values must be finite")
        w = None
        if weights is not None:
            w = np.asarray(weights, dtype=np.float64)
            if w.shape != (array.shape[0],) or not (np.isfinite(w).all() and (w > 0).all()):
                raise ValueError(f"window weights need {array.shape[0]} positive finite numbers, not shape {w.shape}")
        mean = array.mean(axis=0) if w is None else w @ array / w.sum()
        if point is not None:
            mean = np.asarray(point, dtype=np.float64)
            if mean.shape != (array.shape[1],) or not np.isfinite(mean).all():
                raise ValueError(f"the recorded scores need {array.shape[1]} finite numbers, not shape {mean.shape}")
        return cls(mean, windows=array, weights=w)

    @classmethod
    def from_normal(cls, mean: Sequence[float] | np.ndarray, stderr: Sequence[float] | np.ndarray) -> BlockScores:
        """Scores known only by their means and standard errors, both shape (L,)."""
        m, s = np.asarray(mean, dtype=np.float64), np.asarray(stderr, dtype=np.float64)
        if m.ndim != 1 or m.shape != s.shape or len(m) < 2:
            raise ValueError(f"means and standard errors need the same shape (blocks ≥ 2,), not {m.shape}, {s.shape}")
        if not (np.isfinite(m).all() and np.isfinite(s).all() and (s >= 0).all()):
            raise ValueError("means must be finite and standard errors finite and nonnegative")
        return cls(m, stderr=s)

    @property
    def blocks(self) -> int:
        return len(self.point)

    def redraw(self, rng: np.random.Generator, draws: int) -> np.ndarray:
        """`draws` bootstrap replicates of the per-block scores, shape (draws, L)."""
        if self.windows is None:
            assert self.stderr is not None
            return rng.normal(self.point, self.stderr, size=(draws, self.blocks))
        n, weights = len(self.windows), self.weights
        weighted = None if weights is None else weights[:, None] * self.windows
        out = np.empty((draws, self.blocks))
        for start in range(0, draws, CHUNK):
            stop = min(draws, start + CHUNK)
            counts = rng.multinomial(n, np.full(n, 1 / n), size=stop - start)  # resampling with replacement
            if weights is None or weighted is None:
                out[start:stop] = counts @ self.windows / n
            else:  # the ratio Σ count·weight·value / Σ count·weight of the drawn windows
                out[start:stop] = (counts @ weighted) / (counts @ weights)[:, None]
        return out


@dataclass(frozen=True)
class RankingStability:
    """Agreement of two per-block rankings, with percentile 95 % intervals.

    Attributes:
        tau: Kendall's τ-b of the two score vectors (None if a side is constant).
        rho: Spearman's ρ (None if a side is constant).
        jaccard: Overlap of the k lowest-scoring blocks, for k = 1 … ⌊L/2⌋.
        tau_ci: Interval of τ-b (None without enough defined draws).
        rho_ci: Interval of ρ.
        jaccard_ci: Interval per k.
        method: "bootstrap", "parametric_bootstrap" or "mixed_bootstrap" (module docstring).
        draws: Bootstrap draws.
        seed: Seed of the draws.
    """

    tau: float | None
    rho: float | None
    jaccard: tuple[float, ...]
    tau_ci: Interval | None
    rho_ci: Interval | None
    jaccard_ci: tuple[Interval, ...]
    method: str
    draws: int
    seed: int

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields; intervals as [low, high] lists, k implied by position (k = index + 1)."""
        return {
            "kendall_tau_b": self.tau,
            "spearman_rho": self.rho,
            "jaccard_lowest_k": list(self.jaccard),
            "kendall_tau_b_ci95": None if self.tau_ci is None else list(self.tau_ci),
            "spearman_rho_ci95": None if self.rho_ci is None else list(self.rho_ci),
            "jaccard_lowest_k_ci95": [list(ci) for ci in self.jaccard_ci],
            "method": self.method,
            "draws": self.draws,
            "seed": self.seed,
        }


def _rows(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    a, b = np.atleast_2d(np.asarray(x, dtype=np.float64)), np.atleast_2d(np.asarray(y, dtype=np.float64))
    if a.shape != b.shape or a.shape[1] < 2:
        raise ValueError(f"two rankings of the same blocks (at least 2) are needed, not shapes {a.shape}, {b.shape}")
    return a, b


def kendall_tau_b_rows(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Kendall's τ-b of each row pair: Σ sign(Δx) sign(Δy) / sqrt(#untied-x pairs · #untied-y pairs).

    τ-b (not τ-a) because scores can tie; it equals scipy.stats.kendalltau's default.
    Shapes: (draws, L) and (draws, L) → (draws,); NaN where a row is constant.
    """
    a, b = _rows(x, y)
    first, second = np.triu_indices(a.shape[1], k=1)
    out = np.empty(len(a))
    for start in range(0, len(a), CHUNK):
        sx = np.sign(a[start : start + CHUNK, second] - a[start : start + CHUNK, first])
        sy = np.sign(b[start : start + CHUNK, second] - b[start : start + CHUNK, first])
        norm = np.sqrt(np.abs(sx).sum(axis=1) * np.abs(sy).sum(axis=1))
        with np.errstate(invalid="ignore", divide="ignore"):
            out[start : start + CHUNK] = np.where(norm > 0, (sx * sy).sum(axis=1) / norm, np.nan)
    return out


def spearman_rho_rows(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Spearman's ρ of each row pair: Pearson's r of the average-tie ranks. (draws, L) × 2 → (draws,)."""
    from scipy import stats

    a, b = _rows(x, y)
    ra, rb = stats.rankdata(a, axis=1), stats.rankdata(b, axis=1)
    ra, rb = ra - ra.mean(axis=1, keepdims=True), rb - rb.mean(axis=1, keepdims=True)
    norm = np.sqrt((ra**2).sum(axis=1) * (rb**2).sum(axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(norm > 0, (ra * rb).sum(axis=1) / norm, np.nan)


def lowest_k_jaccard_rows(x: np.ndarray, y: np.ndarray, rng: np.random.Generator | None = None) -> np.ndarray:
    """Jaccard overlap of the k lowest-scoring blocks of each side, k = 1 … ⌊L/2⌋, per row pair.

    The k-sets always have k blocks. Ties are broken by block index (the earlier block counts as lower,
    deterministic) or, with `rng`, in a uniformly random order drawn anew for each row and side: the
    draw `ranking_stability` averages over, so that no overlap is manufactured by the tie-break.
    Shapes: (draws, L) × 2 → (draws, ⌊L/2⌋).
    """
    a, b = _rows(x, y)
    blocks = a.shape[1]
    ks = np.arange(1, blocks // 2 + 1)
    positions = []
    for side in (a, b):
        if rng is None:
            order = np.argsort(side, axis=1, kind="stable")
        else:  # a random permutation first, then a stable sort by score: tied blocks keep the random order
            shuffled = np.argsort(rng.random(side.shape), axis=1)
            within = np.argsort(np.take_along_axis(side, shuffled, axis=1), axis=1, kind="stable")
            order = np.take_along_axis(shuffled, within, axis=1)
        position = np.empty_like(order)
        np.put_along_axis(position, order, np.arange(blocks)[None, :].repeat(len(side), axis=0), axis=1)
        positions.append(position)
    out = np.empty((len(a), len(ks)))
    for start in range(0, len(a), CHUNK):
        first = positions[0][start : start + CHUNK, None, :] < ks[None, :, None]
        second = positions[1][start : start + CHUNK, None, :] < ks[None, :, None]
        both = (first & second).sum(axis=2)
        out[start : start + CHUNK] = both / (2 * ks[None, :] - both)
    return out


def _single(value: float) -> float | None:
    return None if math.isnan(value) else float(value)


def kendall_tau_b(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> float | None:
    """Kendall's τ-b of two score vectors over the same blocks, shape (L,); None if one is constant."""
    return _single(kendall_tau_b_rows(np.asarray(x)[None], np.asarray(y)[None])[0])


def spearman_rho(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> float | None:
    """Spearman's ρ of two score vectors over the same blocks, shape (L,); None if one is constant."""
    return _single(spearman_rho_rows(np.asarray(x)[None], np.asarray(y)[None])[0])


def lowest_k_jaccard(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> tuple[float, ...]:
    """Jaccard overlap of the k lowest-scoring blocks for k = 1 … ⌊L/2⌋ (see `lowest_k_jaccard_rows`)."""
    return tuple(float(v) for v in lowest_k_jaccard_rows(np.asarray(x)[None], np.asarray(y)[None])[0])


def expected_lowest_k_jaccard(
    x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray, rng: np.random.Generator
) -> tuple[float, ...]:
    """The lowest-k Jaccard overlap averaged over uniformly random tie-breaks (exact when nothing ties).

    With tied scores at the boundary of the k lowest, which blocks are "the k lowest" is not determined
    by the data; breaking ties by index would make two all-tied rankings overlap perfectly (J = 1).
    This is the mean over `TIE_BREAKS` independent random tie-breaks of both sides: for two all-tied
    rankings it is the chance overlap of `lowest_k_jaccard_chance`.
    """
    a, b = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if len(np.unique(a)) == len(a) and len(np.unique(b)) == len(b):
        return lowest_k_jaccard(a, b)
    rows = lowest_k_jaccard_rows(np.tile(a, (TIE_BREAKS, 1)), np.tile(b, (TIE_BREAKS, 1)), rng)
    return tuple(float(v) for v in rows.mean(axis=0))


def lowest_k_jaccard_chance(blocks: int) -> tuple[float, ...]:
    """The expected lowest-k Jaccard overlap of two unrelated rankings of `blocks` blocks, k = 1 … ⌊L/2⌋.

    Two independent uniformly random k-sets of L share X ~ Hypergeometric(L, k, k) blocks, and their
    Jaccard overlap is X / (2k − X); this is its expectation, exactly (Σ_x P(X = x) · x / (2k − x)).
    """
    from scipy import stats

    if blocks < 2:
        raise ValueError(f"a ranking needs at least 2 blocks, not {blocks}")
    out = []
    for k in range(1, blocks // 2 + 1):
        shared = np.arange(0, k + 1)
        out.append(float((stats.hypergeom.pmf(shared, blocks, k, k) * shared / (2 * k - shared)).sum()))
    return tuple(out)


def _percentile_interval(values: np.ndarray, point: float | None) -> Interval | None:
    """The 2.5/97.5 % percentiles of the defined draws, widened to hold `point` (None: fewer than 2 draws)."""
    finite = values[np.isfinite(values)]
    if len(finite) < 2:
        return None
    low, high = np.percentile(finite, [2.5, 97.5])
    return (float(low), float(high)) if point is None else holding((float(low), float(high)), point)


def ranking_stability(
    first: BlockScores, second: BlockScores, *, draws: int = DEFAULT_DRAWS, seed: int = DEFAULT_SEED
) -> RankingStability:
    """τ-b, ρ and the lowest-k Jaccard curve of two rankings, with bootstrap 95 % intervals.

    Each side is redrawn independently (`BlockScores.redraw`: windows resampled, or normal draws), the
    statistics recomputed per draw, and the 2.5/97.5 percentiles of the defined draws reported. The
    point values come from the full data. Draws of the first side come first from the one seeded
    generator, then the second's, so the result depends only on the inputs, `draws` and `seed`.

    Args:
        first: One side's block scores, L blocks.
        second: The other side's, the same L blocks in the same order.
        draws: Bootstrap draws (≥ 2).
        seed: Seed of the draws.
    """
    if first.blocks != second.blocks:
        raise ValueError(f"the two rankings cover different numbers of blocks: {first.blocks} vs {second.blocks}")
    if draws < 2:
        raise ValueError("a bootstrap needs at least two draws")
    kinds = {first.windows is None, second.windows is None}
    method = "mixed_bootstrap" if len(kinds) == 2 else "parametric_bootstrap" if True in kinds else "bootstrap"
    rng = np.random.default_rng(seed)
    x, y = first.redraw(rng, draws), second.redraw(rng, draws)
    curve = lowest_k_jaccard_rows(x, y, rng)  # each draw breaks its ties at random, as the point value does
    tau, rho = kendall_tau_b(first.point, second.point), spearman_rho(first.point, second.point)
    jaccard = expected_lowest_k_jaccard(first.point, second.point, rng)
    return RankingStability(
        tau=tau,
        rho=rho,
        jaccard=jaccard,
        tau_ci=_percentile_interval(kendall_tau_b_rows(x, y), tau),
        rho_ci=_percentile_interval(spearman_rho_rows(x, y), rho),
        jaccard_ci=tuple(
            _percentile_interval(curve[:, k], jaccard[k]) or (math.nan, math.nan) for k in range(curve.shape[1])
        ),
        method=method,
        draws=draws,
        seed=seed,
    )
