"""stats/mcnemar.py against direct computations (binomial sums, scipy's Clopper–Pearson, a likelihood
maximised numerically) and the coverage of both drop bounds by simulation."""

import math

import numpy as np
import pytest
from scipy import optimize, stats

from layerprobe.stats.mcnemar import (
    discordant_counts,
    drop_upper_exact,
    drop_upper_tango,
    mcnemar,
    mcnemar_pvalue,
    tango_score,
)


def test_discordant_counts_match_a_loop():
    rng = np.random.default_rng(1)
    base, cand = rng.random(200) < 0.7, rng.random(200) < 0.6
    losses = sum(1 for x, y in zip(base, cand, strict=True) if x and not y)
    gains = sum(1 for x, y in zip(base, cand, strict=True) if y and not x)
    assert discordant_counts(base, cand) == (losses, gains)
    assert discordant_counts(base.astype(int).tolist(), cand.astype(int).tolist()) == (losses, gains)
    with pytest.raises(ValueError, match="aligned"):
        discordant_counts([1, 0], [1])
    with pytest.raises(ValueError, match="right/wrong"):
        discordant_counts([1, 2], [1, 0])


@pytest.mark.parametrize(("losses", "gains"), [(0, 0), (3, 0), (7, 2), (10, 10), (40, 61), (1, 30)])
def test_exact_pvalue_is_the_two_sided_binomial_sum(losses, gains):
    trials = losses + gains
    tail = sum(math.comb(trials, k) for k in range(min(losses, gains) + 1)) / 2**trials
    direct = min(1.0, 2 * tail)  # the two tails are mirror images at p = 1/2
    assert mcnemar_pvalue(losses, gains) == pytest.approx(direct, rel=1e-12)


def test_exact_bound_matches_scipys_clopper_pearson():
    alpha = 0.05
    each = 1 - math.sqrt(1 - alpha)
    for losses, gains, n in [(12, 5, 300), (5, 12, 300), (0, 0, 50), (30, 30, 100), (0, 4, 80), (9, 0, 9)]:
        trials = losses + gains
        split_upper = (
            1.0 if trials == 0 else stats.binomtest(losses, trials).proportion_ci(1 - 2 * each, method="exact").high
        )
        rate = stats.binomtest(trials, n).proportion_ci(1 - each, method="exact")
        split = 2 * split_upper - 1
        direct = (rate.high if split >= 0 else rate.low) * split
        assert drop_upper_exact(np.array(losses), np.array(gains), np.array(n)) == pytest.approx(direct, abs=1e-12)


def test_tango_restricted_estimate_maximises_the_constrained_likelihood():
    b, c, n = 14, 6, 200
    for drop in (-0.05, 0.0, 0.02, 0.08):

        def negative_log_likelihood(q, drop=drop):
            return -(b * math.log(q + drop) + c * math.log(q) + (n - b - c) * math.log(1 - 2 * q - drop))

        low = max(0.0, -drop) + 1e-12
        best = optimize.minimize_scalar(negative_log_likelihood, bounds=(low, (1 - drop) / 2 - 1e-12), method="bounded")
        q = best.x
        expected = (b - c - n * drop) / math.sqrt(n * (2 * q + drop - drop**2))
        z = tango_score(np.array(b, float), np.array(c, float), np.array(n, float), np.array(drop))
        assert z == pytest.approx(expected, abs=1e-4)


@pytest.mark.parametrize(("b", "c", "n"), [(14, 6, 200), (3, 9, 50), (0, 0, 100), (40, 2, 60), (0, 5, 30)])
def test_tango_bound_is_the_crossing_of_a_decreasing_score(b, c, n):
    grid = np.linspace((b - c) / n, 1, 20001)[:-1]
    z = tango_score(np.full_like(grid, b), np.full_like(grid, c), np.full_like(grid, n), grid)
    assert np.all(np.diff(z) <= 1e-12)  # decreasing, so the set {Z ≥ −z95} is an interval from the estimate
    crossing = grid[np.flatnonzero(z >= -stats.norm.ppf(0.95))[-1]]
    bound = drop_upper_tango(np.array(b), np.array(c), np.array(n))
    assert crossing <= bound <= crossing + grid[1] - grid[0] + 1e-12
    if b == c == 0:  # the closed form: z² / (n + z²)
        z95 = stats.norm.ppf(0.95)
        assert bound == pytest.approx(z95**2 / (n + z95**2), abs=1e-9)


CASES = [
    (n, pb, pc)
    for n in (30, 100, 400, 1500)
    for pb, pc in ((0.05, 0.05), (0.1, 0.04), (0.03, 0.1), (0.2, 0.2), (0.02, 0.0), (0.3, 0.1))
]
SIMULATIONS = 2000


@pytest.fixture(scope="module")
def coverage():
    rng = np.random.default_rng(7)
    out = {}
    for n, pb, pc in CASES:
        counts = rng.multinomial(n, [pb, pc, 1 - pb - pc], size=SIMULATIONS)
        b, c = counts[:, 0], counts[:, 1]
        out[n, pb, pc] = {
            "exact": np.mean(pb - pc <= drop_upper_exact(b, c, n)),
            "tango": np.mean(pb - pc <= drop_upper_tango(b, c, n)),
        }
    return out


def test_exact_bound_covers_in_every_case(coverage):
    floor = 0.95 - 3 * math.sqrt(0.95 * 0.05 / SIMULATIONS)
    assert all(cell["exact"] >= floor for cell in coverage.values())


def test_tango_bound_covers_near_nominal(coverage):
    pooled = np.mean([cell["tango"] for cell in coverage.values()])
    assert abs(pooled - 0.95) <= 3 * math.sqrt(0.95 * 0.05 / (SIMULATIONS * len(CASES))) + 0.005
    assert min(cell["tango"] for cell in coverage.values()) >= 0.9


def test_bounds_tighten_with_more_documents_and_tango_is_narrower():
    previous = {"exact": math.inf, "tango": math.inf}
    for n in (100, 400, 1600, 6400):
        b, c = np.array(n // 20), np.array(n // 25)
        bounds = {"exact": float(drop_upper_exact(b, c, n)), "tango": float(drop_upper_tango(b, c, n))}
        assert (b - c) / n < bounds["tango"] < bounds["exact"]
        assert all(bounds[k] < previous[k] for k in bounds)
        previous = bounds


def test_mcnemar_result():
    base = [1] * 60 + [0] * 40
    cand = [1] * 50 + [0] * 10 + [1] * 4 + [0] * 36  # 10 losses, 4 gains
    result = mcnemar(base, cand)
    assert (result.documents, result.losses, result.gains) == (100, 10, 4)
    assert result.delta == pytest.approx(-0.06) and result.drop == pytest.approx(0.06)
    assert result.pvalue == pytest.approx(stats.binomtest(10, 14).pvalue)
    assert result.bound == "exact" and result.level == 0.95
    assert result.drop_upper == pytest.approx(float(drop_upper_exact(np.array(10), np.array(4), np.array(100))))
    assert result.non_inferior(result.drop_upper) and not result.non_inferior(0.05)
    tango = mcnemar(base, cand, bound="tango", alpha=0.1)
    assert tango.level == 0.9 and tango.drop < tango.drop_upper < result.drop_upper
    with pytest.raises(ValueError, match="unknown bound"):
        mcnemar(base, cand, bound="wald")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="no documents"):
        mcnemar([], [])
