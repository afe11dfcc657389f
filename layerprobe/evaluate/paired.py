"""The paired ΔP uncertainty: variant − baseline from the per-document metric values of two evaluations.

lm-eval computes a value per document (`process_results`) and then aggregates them (`mean`,
`weighted_perplexity`, `bits_per_byte`, …); with `log_samples=True` its `evaluate` returns those values.
The SQuAD scorer and the corpus metric have per-question and per-window values the same way
(`results.MetricSamples`). Pairing each pruned variant with the baseline document by document (see
`layerprobe.stats` for why pairing matters) gives ΔP a much smaller stderr than two independent ones.

A group (MMLU) is aggregated by lm-eval over its leaf tasks, size-weighted or not (`weight_by_size`), so
values are kept per leaf task and the group's rule is kept with them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TypedDict

from layerprobe.results import MetricSamples
from layerprobe.stats import (
    DEFAULT_DRAWS,
    DEFAULT_SEED,
    PairedDelta,
    paired_bootstrap,
    paired_mean_stats,
    stratified_mean_stats,
)

MEAN = "mean"
# Corpus-level aggregations that score a whole corpus per call (sacrebleu): lm-eval's own bootstrap
# caps them at 100 draws, and so does this one.
SLOW_AGGREGATIONS = frozenset({"bleu", "chrf", "ter"})
SLOW_DRAWS = 100

# An lm-eval aggregation: per-document values (floats, or [value, weight] pairs) → the corpus-level score.
Aggregate = Callable[[list[object]], float]


class PairedColumns(TypedDict):
    """The paired fields of one metric of prune_drop.json (`results.MetricDrop`), one entry per removed block."""

    delta_stderr: list[float | None]
    delta_ci95: list[list[float] | None]
    significant: list[bool | None]  # unadjusted here; prune/assemble.py replaces it by the run's adjusted flags
    p_value: list[float | None]  # two-sided, unadjusted (`stats.PairedDelta.pvalue`)
    delta_method: str | None  # "paired_mean" or "paired_bootstrap" when every block used the same
    bootstrap: dict[str, int] | None  # {"draws", "seed"} when a bootstrap was used


def aggregation_function(name: str) -> Aggregate | None:
    """lm-eval's aggregation function registered under `name` (None if it has none by that name)."""
    from lm_eval.api.registry import get_aggregation

    try:
        return get_aggregation(name)
    except (KeyError, ValueError):
        return None


def paired_delta(
    base: MetricSamples, variant: MetricSamples, *, draws: int = DEFAULT_DRAWS, seed: int = DEFAULT_SEED
) -> PairedDelta | None:
    """The uncertainty of variant − base from per-document values; None if the documents do not match.

    Means over documents get the closed form (pooled over a size-weighted group's tasks, stratified for
    an unweighted one); every other aggregation a paired bootstrap with lm-eval's own function.
    """
    if base.values.keys() != variant.values.keys():
        return None
    strata = []  # (weight, base values, variant values) per leaf task
    for task in sorted(base.values):  # sorted tasks and documents: the bootstrap's draws are reproducible
        docs, other = base.values[task], variant.values[task]
        if docs.keys() != other.keys() or not docs:
            return None
        ids = sorted(docs)
        weight = 1.0 if base.weight_by_size is False else float(len(ids))
        strata.append((weight, [docs[i] for i in ids], [other[i] for i in ids]))
    if base.aggregation == MEAN:
        if not all(_is_number(v) for _, b, p in strata for v in (*b, *p)):
            return None
        if len(strata) == 1 or base.weight_by_size is not False:  # one mean over all documents
            return paired_mean_stats([v for s in strata for v in s[1]], [v for s in strata for v in s[2]])
        return stratified_mean_stats(strata)
    aggregate = aggregation_function(base.aggregation)
    if aggregate is None:
        return None
    if base.aggregation in SLOW_AGGREGATIONS:
        draws = min(draws, SLOW_DRAWS)
    return paired_bootstrap(strata, _tupled(aggregate), draws=draws, seed=seed)


def _tupled(aggregate: Aggregate) -> Aggregate:
    """lm-eval's corpus aggregations unpack (value, weight) pairs; JSON gave them back as lists."""
    return lambda items: aggregate([tuple(i) if isinstance(i, list) else i for i in items])


def _is_number(value: object) -> bool:
    """Whether a per-document value can be averaged."""
    return isinstance(value, (int, float))  # bools too: lm-eval's acc can be one


def paired_columns(
    base: MetricSamples | None,
    pruned: list[MetricSamples | None],
    *,
    draws: int = DEFAULT_DRAWS,
    seed: int = DEFAULT_SEED,
) -> PairedColumns:
    """The paired fields of one metric over every removed block, as stored next to `delta`.

    Returns `delta_stderr`, `delta_ci95`, `significant`, `p_value` (one entry per block, None where the
    values do not pair), `delta_method` and `bootstrap` ({"draws", "seed"} when a bootstrap was used, else None).
    """
    found = [None if base is None or p is None else paired_delta(base, p, draws=draws, seed=seed) for p in pruned]
    methods = {d.method for d in found if d is not None}
    bootstrapped = next((d for d in found if d is not None and d.method == "paired_bootstrap"), None)
    settings = None if bootstrapped is None else {"draws": bootstrapped.draws, "seed": bootstrapped.seed}
    return {
        "delta_stderr": [None if d is None else d.stderr for d in found],
        "delta_ci95": [None if d is None or d.ci95 is None else list(d.ci95) for d in found],
        "significant": [None if d is None else d.significant for d in found],
        "p_value": [None if d is None else d.pvalue for d in found],
        "delta_method": methods.pop() if len(methods) == 1 else None,
        "bootstrap": None if settings is None else {k: v for k, v in settings.items() if v is not None},
    }


# Metrics that compare a variant with the full model: the full model's own value is fixed (KL and cosine
# distance to itself 0, agreement with itself 1), and every value lies in the range given here.
REFERENCE_RANGES: dict[str, tuple[float, float]] = {
    "kl": (0.0, math.inf),
    "top1_agreement": (0.0, 1.0),
    "cosine_distance": (0.0, 2.0),
}


def within_range(metric: str, baseline: float, intervals: list[list[float] | None]) -> list[list[float] | None]:
    """Paired intervals of ΔP cut to what `metric` can reach from its fixed `baseline`, where both are known.

    A paired t or bootstrap interval of a mean near a bound can pass it (a top-1 agreement of 1.0 shown
    as [0.80, 1.20] on few windows). The full model's value of a comparison with itself is a constant, so
    the true ΔP lies in [low − baseline, high − baseline] and the cut interval covers it as often as the
    uncut one did; it still holds its estimate, which lies in the range. Any other metric is returned as is.
    """
    low, high = REFERENCE_RANGES.get(metric.split(",")[0], (-math.inf, math.inf))
    if not math.isfinite(baseline):
        return intervals
    return [None if ci is None else [max(ci[0], low - baseline), min(ci[1], high - baseline)] for ci in intervals]
