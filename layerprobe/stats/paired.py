"""Pure statistics for paired comparisons of model variants scored on the same documents.

prune-drop scores the baseline and every "block l removed" variant on the very same documents, so the
per-document scores of two variants are strongly correlated: a hard question is hard for both. The
uncertainty of a difference must therefore come from the per-document *differences* (paired), not from
the two scores' own standard errors combined as if independent, which is several times too wide.

- `paired_mean_stats`: metrics that are means over documents (acc, acc_norm, exact_match, f1): the
  standard error of the mean difference, sample std (ddof=1) / sqrt(n), and a normal 95 % interval;
  for 0/1 values (acc, exact_match) Agresti–Min's paired interval and the exact McNemar test instead
  (`paired_proportion_stats`), which stay honest when few or no answers change.
- `paired_bootstrap`: corpus-level metrics (perplexity, bits per byte) that are not means of per-doc
  values: documents are resampled with replacement (the same draw for both variants) and the metric is
  recomputed with the task's own aggregation function; the percentile 95 % interval of the differences,
  widened to hold the full-sample difference (`holding`).
- `spearman`, `spearman_interval`, `top_k_overlap`: how well two per-block rankings agree.

Everything here is plain python/numpy on lists: no model, no lm-eval.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from layerprobe.core import DEFAULT_DRAWS, DEFAULT_SEED
from layerprobe.stats.mcnemar import mcnemar_pvalue
from layerprobe.stats.multiplicity import bootstrap_pvalue, normal_pvalue

Z95 = 1.959963984540054  # two-sided 95 % quantile of the standard normal


@dataclass(frozen=True)
class PairedDelta:
    """The uncertainty of one difference P_variant − P_base.

    Attributes:
        delta: The difference of the two aggregate scores.
        stderr: Its standard error (None with fewer than two documents).
        ci95: The 95 % interval (low, high), or None where no stderr exists.
        method: "paired_mean" (closed form) or "paired_bootstrap".
        draws: Bootstrap draws (None for the closed form).
        seed: Bootstrap seed (None for the closed form).
        pvalue: Two-sided p-value of "no difference", unadjusted: the normal (Wald) test of delta/stderr for
            the closed form, the bootstrap test of the draws (`multiplicity.bootstrap_pvalue`) for a
            bootstrap; None where no interval exists.
    """

    delta: float
    stderr: float | None
    ci95: tuple[float, float] | None
    method: str
    draws: int | None = None
    seed: int | None = None
    pvalue: float | None = None

    @property
    def significant(self) -> bool | None:
        """Whether the 95 % interval excludes 0 (None where there is no interval)."""
        if self.ci95 is None or not all(math.isfinite(v) for v in self.ci95):
            return None
        return self.ci95[0] > 0 or self.ci95[1] < 0


def paired_mean_stats(base: Sequence[float], variant: Sequence[float]) -> PairedDelta:
    """Paired stderr of the difference of two means over the same documents.

    The stderr is the sample standard deviation (ddof=1) of the per-document differences over sqrt(n);
    the 95 % interval is delta ± 1.96 stderr (the mean of n differences is close to normal), except for
    0/1 values, whose interval and p-value come from the paired table (`paired_proportion_stats`).

    Args:
        base: Per-document scores of the baseline, aligned with `variant` (same document at each index).
        variant: Per-document scores of the variant.
    """
    if len(base) != len(variant):
        raise ValueError(f"paired samples differ in length: {len(base)} vs {len(variant)}")
    n = len(base)
    if n == 0:
        raise ValueError("no documents to compare")
    if n > 1 and is_binary(base) and is_binary(variant):
        return paired_proportion_stats(base, variant)
    diffs = np.asarray(variant, dtype=np.float64) - np.asarray(base, dtype=np.float64)
    stderr = float(diffs.std(ddof=1) / math.sqrt(n)) if n > 1 else None
    return _normal(float(diffs.mean()), stderr)


def is_binary(values: Sequence[float]) -> bool:
    """Whether every value is 0 or 1 (a correct / incorrect answer per document)."""
    return all(v == 0 or v == 1 for v in values)


def paired_proportion_stats(base: Sequence[float], variant: Sequence[float]) -> PairedDelta:
    """The paired difference of two proportions (0/1 per document): Agresti–Min's interval, McNemar's test.

    With b documents right before and wrong after and c the reverse, the difference is (c − b) / n. The
    normal interval ± 1.96 SE has zero width when no answer changes (b = c = 0), claiming an exact zero
    from any number of documents, and under-covers when few change. Agresti and Min (Statistics in
    Medicine 24, 2005) add 1/2 to each of the four cells of the paired table before the Wald interval:
    centre (c − b) / (n + 2), variance ((b + c + 1) − (c − b)² / (n + 2)) / (n + 2)², never zero (b = c = 0
    gives ± 1.96 / (n + 2)), with coverage close to 95 % down to small n. Newcombe's score interval was
    not used: it collapses to zero width when b = c = 0 and the accuracy is 1/2. The p-value is the exact
    two-sided McNemar test of b against c; `stderr` stays the sample standard error of the differences.
    """
    n = len(base)
    b = sum(1 for x, y in zip(base, variant, strict=True) if x == 1 and y == 0)
    c = sum(1 for x, y in zip(base, variant, strict=True) if x == 0 and y == 1)
    diffs = np.asarray(variant, dtype=np.float64) - np.asarray(base, dtype=np.float64)
    stderr = float(diffs.std(ddof=1) / math.sqrt(n)) if n > 1 else None
    centre = (c - b) / (n + 2)
    half = Z95 * math.sqrt(max(0.0, (b + c + 1) - (c - b) ** 2 / (n + 2))) / (n + 2)
    ci = (max(-1.0, centre - half), min(1.0, centre + half))
    return PairedDelta((c - b) / n, stderr, ci, "paired_mean", pvalue=mcnemar_pvalue(b, c))


def stratified_mean_stats(strata: Sequence[tuple[float, Sequence[float], Sequence[float]]]) -> PairedDelta:
    """Paired stderr of a weighted mean of per-stratum means (lm-eval groups with unweighted subtasks).

    Args:
        strata: (weight, base, variant) per subtask; the aggregate is sum(weight * mean) / sum(weight).
            The strata hold disjoint documents, so their variances add.
    """
    total = sum(w for w, _, _ in strata)
    delta, variance, defined = 0.0, 0.0, True
    for weight, base, variant in strata:
        part = paired_mean_stats(base, variant)
        share = weight / total
        delta += share * part.delta
        if part.stderr is None:
            defined = False
        else:
            variance += share**2 * part.stderr**2
    return _normal(delta, math.sqrt(variance) if defined else None)


def paired_bootstrap(
    strata: Sequence[tuple[float, Sequence[Any], Sequence[Any]]],
    aggregate: Callable[[list[Any]], float],
    *,
    draws: int = DEFAULT_DRAWS,
    seed: int = DEFAULT_SEED,
) -> PairedDelta:
    """Bootstrap the difference of a corpus-level metric between two variants on the same documents.

    Each draw resamples the documents of every stratum (subtask) with replacement, the same indices for
    both variants, recomputes each stratum's metric with `aggregate` (lm-eval's own aggregation function,
    e.g. `weighted_perplexity` over (log-likelihood, words) pairs), combines strata by their weights, and
    keeps variant − base. The stderr is the standard deviation (ddof=1) of those differences; the 95 %
    interval is their 2.5 and 97.5 percentiles, widened to hold the point `delta` (computed on the full
    sample), which a skewed statistic can leave outside the draws' percentiles.

    Args:
        strata: (weight, base items, variant items) per subtask; one stratum for a plain task.
        aggregate: Items → metric value.
        draws: Number of bootstrap resamples.
        seed: Seed of the resampling (fixed, so a result is reproducible).
    """
    if draws < 2:
        raise ValueError("a bootstrap needs at least two draws")
    total = sum(w for w, _, _ in strata)
    shares = [w / total for w, _, _ in strata]
    for _, base, variant in strata:
        if len(base) != len(variant) or not base:
            raise ValueError("every stratum needs the same, non-zero number of documents in both variants")

    def combined(pick: Callable[[int, int], np.ndarray] | None) -> float:
        value = 0.0
        for share, (k, (_, base, variant)) in zip(shares, enumerate(strata), strict=True):
            index = range(len(base)) if pick is None else pick(k, len(base))
            value += share * (aggregate([variant[i] for i in index]) - aggregate([base[i] for i in index]))
        return value

    delta = combined(None)
    rng = np.random.default_rng(seed)
    samples = np.array([combined(lambda _k, n: rng.integers(0, n, size=n)) for _ in range(draws)])
    finite = samples[np.isfinite(samples)]
    if len(finite) < 2:
        return PairedDelta(delta, None, None, "paired_bootstrap", draws, seed)
    low, high = np.percentile(finite, [2.5, 97.5])
    stderr, pvalue = float(finite.std(ddof=1)), bootstrap_pvalue(delta, finite)
    return PairedDelta(
        delta, stderr, holding((float(low), float(high)), delta), "paired_bootstrap", draws, seed, pvalue
    )


def holding(interval: tuple[float, float], estimate: float) -> tuple[float, float]:
    """`interval` widened just enough to hold `estimate` (a percentile bootstrap interval may not).

    The point of a statistic that is not a smooth mean (a perplexity, Kendall's τ at its bound of 1, the
    overlap of a tie-broken set) can lie outside its draws' 2.5-97.5 % percentiles; every interval
    layerprobe reports holds its own estimate, so the nearer bound moves to it. A NaN estimate leaves
    the interval as it is.
    """
    low, high = interval
    if math.isnan(estimate):
        return low, high
    return min(low, estimate), max(high, estimate)


def _normal(delta: float, stderr: float | None) -> PairedDelta:
    ci = None if stderr is None else (delta - Z95 * stderr, delta + Z95 * stderr)
    return PairedDelta(delta, stderr, ci, "paired_mean", pvalue=normal_pvalue(delta, stderr))


# ------------------------------------------------------------------------------------ rank agreement
def ranks(values: Sequence[float] | np.ndarray) -> np.ndarray:
    """1-based ranks, ties sharing their average rank (as Spearman's rho needs)."""
    x = np.asarray(values, dtype=np.float64)
    order = np.argsort(x, kind="stable")
    out = np.empty(len(x), dtype=np.float64)
    i = 0
    while i < len(x):
        j = i
        while j + 1 < len(x) and x[order[j + 1]] == x[order[i]]:
            j += 1
        out[order[i : j + 1]] = (i + j) / 2 + 1
        i = j + 1
    return out


def spearman(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> float | None:
    """Spearman's rank correlation: Pearson's r of the (average-tie) ranks; None if a side is constant."""
    if len(x) != len(y):
        raise ValueError(f"rank correlation of sequences of different lengths: {len(x)} vs {len(y)}")
    if len(x) < 2:
        return None
    rx, ry = ranks(x), ranks(y)
    rx, ry = rx - rx.mean(), ry - ry.mean()
    norm = math.sqrt(float((rx**2).sum() * (ry**2).sum()))
    return None if norm == 0 else float((rx * ry).sum() / norm)


# Fewer distinct values than this on either side and ρ says little: it is then a handful of tied ranks.
INFORMATIVE_DISTINCT = 4


def spearman_interval(x: Sequence[float], y: Sequence[float]) -> tuple[float | None, tuple[float, float] | None]:
    """Spearman's rho and its 95 % interval by Fisher's z with Bonett and Wright's standard error.

    z = atanh(ρ), SE = sqrt((1 + ρ²/2) / (n − 3)), interval tanh(z ∓ 1.96 SE): always around ρ itself
    (a percentile bootstrap over a handful of tied blocks is not: +0.65 [+0.66, +0.96] was seen) and in
    [−1, 1]. No interval with fewer than 4 pairs (n − 3 ≤ 0) or when a side is constant; at |ρ| = 1 the
    interval is the point. References in docs/methods.md.
    """
    rho = spearman(x, y)
    if rho is None or len(x) < 4:
        return rho, None
    if abs(rho) >= 1.0:
        return rho, (rho, rho)
    half = Z95 * math.sqrt((1.0 + rho * rho / 2.0) / (len(x) - 3))
    z = math.atanh(rho)
    return rho, (math.tanh(z - half), math.tanh(z + half))


def distinct_values(values: Sequence[float]) -> int:
    """How many different values a side has: below `INFORMATIVE_DISTINCT`, a rank correlation says little."""
    return len(set(values))


def top_k_overlap(first: Sequence[Any], second: Sequence[Any], k: int) -> float:
    """Share of the first k items of one ranking that are also among the first k of the other."""
    if k < 1:
        raise ValueError("k must be at least 1")
    return len(set(first[:k]) & set(second[:k])) / k
