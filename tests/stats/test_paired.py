"""evaluate/stats.py against direct float64 computations written here (and scipy where installed)."""

import math
import random

import numpy as np
import pytest
from reference import agresti_min
from scipy import stats as scipy_stats

from layerprobe.stats.paired import (
    Z95,
    paired_bootstrap,
    paired_mean_stats,
    ranks,
    spearman,
    spearman_interval,
    stratified_mean_stats,
    top_k_overlap,
)


def _mean(xs):
    return math.fsum(xs) / len(xs)


def _stdev(xs):
    m = _mean(xs)
    return math.sqrt(math.fsum((x - m) ** 2 for x in xs) / (len(xs) - 1))


def _pearson(x, y):
    mx, my = _mean(x), _mean(y)
    num = math.fsum((a - mx) * (b - my) for a, b in zip(x, y, strict=True))
    den = math.sqrt(math.fsum((a - mx) ** 2 for a in x) * math.fsum((b - my) ** 2 for b in y))
    return num / den


def _avg_ranks(x):
    # Rank of each value = 1 + (number smaller) + (number equal - 1) / 2: average rank over ties.
    return [1 + sum(v < a for v in x) + (sum(v == a for v in x) - 1) / 2 for a in x]


def test_paired_mean_matches_direct_formula_and_is_narrower_than_unpaired():
    rng = random.Random(0)
    base = [rng.random() for _ in range(200)]  # e.g. a per-document F1
    # The variant mostly agrees with the baseline: the paired stderr is far below the unpaired one.
    variant = [b + rng.gauss(0.0, 0.05) for b in base]
    got = paired_mean_stats(base, variant)
    diffs = [v - b for v, b in zip(variant, base, strict=True)]
    expected = _stdev(diffs) / math.sqrt(len(diffs))
    assert got.delta == pytest.approx(_mean(variant) - _mean(base), abs=1e-12)
    assert got.stderr == pytest.approx(expected, rel=1e-12)
    assert got.ci95 == pytest.approx((got.delta - Z95 * expected, got.delta + Z95 * expected), rel=1e-12)
    unpaired = math.hypot(_stdev(base) / math.sqrt(200), _stdev(variant) / math.sqrt(200))
    assert got.stderr < 0.6 * unpaired
    assert got.method == "paired_mean" and got.draws is None


def test_zero_one_values_get_agresti_min_and_an_exact_mcnemar_p():
    rng = random.Random(3)
    for n, flip in ((8, 0.0), (40, 0.05), (200, 0.2), (500, 0.01)):
        base = [float(rng.random() < 0.5) for _ in range(n)]
        variant = [1.0 - v if rng.random() < flip else v for v in base]
        got = paired_mean_stats(base, variant)
        b = sum(1 for x, y in zip(base, variant, strict=True) if (x, y) == (1.0, 0.0))
        c = sum(1 for x, y in zip(base, variant, strict=True) if (x, y) == (0.0, 1.0))
        assert got.delta == pytest.approx((c - b) / n, abs=1e-12)
        assert got.ci95 == pytest.approx(agresti_min(b, c, n), abs=1e-12)
        assert got.pvalue == pytest.approx(1.0 if b + c == 0 else scipy_stats.binomtest(b, b + c).pvalue)
        assert got.ci95[1] - got.ci95[0] > 0  # never the zero width of ± 1.96 SE when no answer changes
    nothing_changed = paired_mean_stats([1.0, 0.0] * 50, [1.0, 0.0] * 50)
    assert nothing_changed.stderr == 0 and nothing_changed.ci95 == pytest.approx((-Z95 / 102, Z95 / 102))


def test_agresti_min_covers_where_the_normal_interval_does_not():
    """Rare answer changes on 30 documents: ± 1.96 SE is often zero-width around a non-zero truth."""
    rng = random.Random(5)
    runs, n, p_loss = 2000, 30, 0.02  # truth: ΔP = −0.02 (no answer gained)
    covered = wald_covered = 0
    for _ in range(runs):
        base = [1.0] * n
        variant = [0.0 if rng.random() < p_loss else 1.0 for _ in range(n)]
        low, high = paired_mean_stats(base, variant).ci95
        covered += low <= -0.02 <= high
        diffs = [v - b for v, b in zip(variant, base, strict=True)]
        se = _stdev(diffs) / math.sqrt(n)
        wald_covered += _mean(diffs) - Z95 * se <= -0.02 <= _mean(diffs) + Z95 * se
    assert covered / runs >= 0.93
    assert wald_covered / runs < 0.7  # b = 0 in 55 % of runs: a zero-width interval at 0


def test_significance_follows_the_interval():
    assert paired_mean_stats([0.0] * 5 + [1.0] * 5, [1.0] * 10).significant is True
    assert paired_mean_stats([0.0, 1.0, 0.0, 1.0], [1.0, 0.0, 0.0, 1.0]).significant is False
    one = paired_mean_stats([0.0], [1.0])
    assert one.stderr is None and one.ci95 is None and one.significant is None


def test_paired_mean_rejects_misaligned_samples():
    with pytest.raises(ValueError):
        paired_mean_stats([1.0, 0.0], [1.0])


def test_stratified_mean_adds_weighted_variances():
    rng = random.Random(1)
    strata = []
    for n in (30, 80):
        base = [rng.random() for _ in range(n)]
        strata.append((1.0, base, [b + rng.gauss(0.1, 0.2) for b in base]))
    got = stratified_mean_stats(strata)
    parts = [[v - b for v, b in zip(var, base, strict=True)] for _, base, var in strata]
    assert got.delta == pytest.approx(0.5 * _mean(parts[0]) + 0.5 * _mean(parts[1]), abs=1e-12)
    var = sum(0.25 * _stdev(p) ** 2 / len(p) for p in parts)
    assert got.stderr == pytest.approx(math.sqrt(var), rel=1e-12)


def _weighted_perplexity(items):
    return math.exp(-sum(ll for ll, _ in items) / sum(w for _, w in items))


def test_paired_bootstrap_replays_the_resampling_by_hand():
    import numpy as np

    rng = random.Random(2)
    base = [(-rng.uniform(50, 150), rng.randint(20, 60)) for _ in range(25)]
    variant = [(ll - rng.uniform(0, 10), w) for ll, w in base]
    got = paired_bootstrap([(1.0, base, variant)], _weighted_perplexity, draws=300, seed=7)
    assert got.delta == pytest.approx(_weighted_perplexity(variant) - _weighted_perplexity(base), rel=1e-12)
    # The same generator, drawn the same way, by hand: one index vector shared by both variants per draw.
    gen = np.random.default_rng(7)
    diffs = []
    for _ in range(300):
        idx = [int(i) for i in gen.integers(0, 25, size=25)]
        diffs.append(_weighted_perplexity([variant[i] for i in idx]) - _weighted_perplexity([base[i] for i in idx]))
    assert got.stderr == pytest.approx(_stdev(diffs), rel=1e-12)
    ordered = sorted(diffs)
    assert ordered[0] <= got.ci95[0] < got.ci95[1] <= ordered[-1]
    assert got.ci95[0] == pytest.approx(float(np.percentile(diffs, 2.5)), rel=1e-12)
    assert got.significant is True  # every document got worse
    assert (got.method, got.draws, got.seed) == ("paired_bootstrap", 300, 7)


def test_paired_bootstrap_interval_holds_a_point_outside_the_draws_percentiles():
    import numpy as np

    def share_distinct(items):  # every resample repeats documents: ≈ 63 % distinct, the full sample 100 %
        return len(set(items)) / len(items)

    base, variant = [0] * 40, list(range(40))
    got = paired_bootstrap([(1.0, base, variant)], share_distinct, draws=300, seed=5)
    gen = np.random.default_rng(5)
    draws = []
    for _ in range(300):
        idx = gen.integers(0, 40, size=40)
        draws.append(share_distinct([variant[i] for i in idx]) - share_distinct([base[i] for i in idx]))
    assert got.delta == pytest.approx(1 - 1 / 40) and float(np.percentile(draws, 97.5)) < got.delta
    assert got.ci95[0] == pytest.approx(float(np.percentile(draws, 2.5)), rel=1e-12)
    assert got.ci95[1] == got.delta  # widened to the estimate, no further


def test_paired_bootstrap_is_reproducible_and_near_the_closed_form_for_a_mean():
    rng = random.Random(3)
    base = [float(rng.random() < 0.5) for _ in range(400)]
    variant = [b if rng.random() < 0.8 else 1 - b for b in base]
    boot = paired_bootstrap([(1.0, base, variant)], _mean, draws=2000, seed=11)
    again = paired_bootstrap([(1.0, base, variant)], _mean, draws=2000, seed=11)
    assert boot == again
    closed = paired_mean_stats(base, variant)
    assert boot.stderr == pytest.approx(closed.stderr, rel=0.1)


def test_ranks_and_spearman_against_direct_and_scipy():
    rng = random.Random(4)
    x = [rng.choice([0.1, 0.2, 0.3, 0.4]) for _ in range(15)]  # many ties
    y = [v + rng.gauss(0, 0.1) for v in x]
    assert list(ranks(x)) == _avg_ranks(x)
    assert spearman(x, y) == pytest.approx(_pearson(_avg_ranks(x), _avg_ranks(y)), abs=1e-12)
    scipy_stats = pytest.importorskip("scipy.stats")
    assert spearman(x, y) == pytest.approx(scipy_stats.spearmanr(x, y).statistic, abs=1e-12)
    assert spearman([1, 1, 1], [1, 2, 3]) is None


def test_spearman_interval_contains_rho_and_reacts_to_noise():
    rng = random.Random(5)
    x = list(range(20))
    tight = [v + rng.gauss(0, 0.5) for v in x]
    loose = [v + rng.gauss(0, 20) for v in x]
    rho, ci = spearman_interval(x, tight)
    assert ci[0] <= rho <= ci[1] and ci[0] > 0.8
    rho2, ci2 = spearman_interval(x, loose)
    assert ci2[1] - ci2[0] > 3 * (ci[1] - ci[0])
    assert spearman_interval([1, 2, 3], [2, 1, 3])[1] is None  # n − 3 = 0: no interval
    assert spearman_interval([1, 2, 3, 4], [1, 2, 3, 4]) == (1.0, (1.0, 1.0))


@pytest.mark.parametrize("seed", range(20))
def test_spearman_interval_always_holds_rho_even_with_ties(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(4, 12))
    x, y = rng.random(n), rng.integers(0, 3, size=n).astype(float)  # y: heavily tied
    rho, ci = spearman_interval(x, y)
    if rho is not None:
        assert ci[0] <= rho <= ci[1]


def test_top_k_overlap():
    assert top_k_overlap([3, 1, 2, 0], [1, 3, 0, 2], 2) == 1.0
    assert top_k_overlap([3, 1, 2, 0], [0, 2, 3, 1], 2) == 0.0
    assert top_k_overlap([3, 1, 2, 0], [3, 2, 1, 0], 2) == 0.5
    with pytest.raises(ValueError):
        top_k_overlap([1], [1], 0)
