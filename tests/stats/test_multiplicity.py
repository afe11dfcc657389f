"""stats/multiplicity.py against direct computations (Holm in tests/reference.py), scipy's BH, simulations."""

import math

import numpy as np
import pytest
from reference import holm_adjusted
from scipy import stats

from layerprobe.stats import paired_mean_stats
from layerprobe.stats.multiplicity import adjust_pvalues, bootstrap_pvalue, normal_pvalue


def bh_direct(p):
    m = len(p)
    out = [0.0] * m
    for i in range(m):
        # the smallest m p_(j) / j over the p-values at least as large as p_i
        out[i] = min(1.0, min(m * p[j] / sum(q <= p[j] for q in p) for j in range(m) if p[j] >= p[i]))
    return out


def random_pvalues(seed, size=40):
    rng = np.random.default_rng(seed)
    p = np.concatenate([rng.random(size // 2), rng.random(size - size // 2) ** 6])
    p[:5] = p[5]  # ties
    return [float(v) for v in rng.permutation(p)]


@pytest.mark.parametrize("seed", range(5))
def test_holm_matches_a_direct_computation(seed):
    p = random_pvalues(seed)
    assert adjust_pvalues(p, "holm").pvalues == pytest.approx(holm_adjusted(p), abs=1e-15)


@pytest.mark.parametrize("seed", range(5))
def test_bh_matches_scipy_and_a_direct_computation(seed):
    p = random_pvalues(seed)
    adjusted = adjust_pvalues(p, "bh").pvalues
    assert adjusted == pytest.approx(list(stats.false_discovery_control(p, method="bh")), abs=1e-14)
    assert adjusted == pytest.approx(bh_direct(p), abs=1e-14)


def test_rejections_equal_the_textbook_step_down_and_step_up_procedures():
    alpha = 0.05
    for seed in range(20):
        p = random_pvalues(seed, size=30)
        ranked = sorted(p)
        m = len(p)
        holm_count = next((i for i in range(m) if ranked[i] > alpha / (m - i)), m)
        bh_count = max((k for k in range(1, m + 1) if ranked[k - 1] <= k * alpha / m), default=0)
        assert sum(adjust_pvalues(p, "holm").rejected(alpha)) == holm_count
        assert sum(adjust_pvalues(p, "bh").rejected(alpha)) == bh_count


def test_missing_pvalues_are_left_out_and_reported():
    p = [0.01, None, 0.04, float("nan"), 0.03]
    for method in ("holm", "bh", "none"):
        result = adjust_pvalues(p, method)
        present = adjust_pvalues([0.01, 0.04, 0.03], method)
        assert result.tested == 3 and result.left_out == (1, 3)
        assert result.pvalues[1] is None and result.pvalues[3] is None
        assert [result.pvalues[i] for i in (0, 2, 4)] == list(present.pvalues)
        assert result.rejected(0.05)[1] is None
    assert adjust_pvalues(p, "none").pvalues == (0.01, None, 0.04, None, 0.03)
    assert adjust_pvalues(p, "holm").pvalues == pytest.approx((0.03, None, 0.06, None, 0.06))
    assert adjust_pvalues(p, "bh").pvalues == pytest.approx((0.03, None, 0.04, None, 0.04))
    empty = adjust_pvalues([None], "bh")
    assert empty.tested == 0 and empty.pvalues == (None,) and empty.left_out == (0,)


def test_invalid_input_is_refused():
    with pytest.raises(ValueError, match="unknown multiplicity method"):
        adjust_pvalues([0.1], "bonferroni")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        adjust_pvalues([1.2], "holm")


def test_error_rates_by_simulation():
    rng = np.random.default_rng(3)
    families, alpha = 2000, 0.05
    effects = np.r_[np.zeros(15), np.full(5, 3.0)]  # 15 true nulls, 5 real effects per family of 20
    pvalues = 2 * stats.norm.sf(np.abs(rng.normal(effects, size=(families, 20))))
    any_false, false_share = 0, []
    for p in pvalues.tolist():
        any_false += any(adjust_pvalues(p[:15], "holm").rejected(alpha))  # all nulls true: the FWER
        bh = adjust_pvalues(p, "bh").rejected(alpha)
        false_share.append(sum(bh[:15]) / max(1, sum(bh)))
    margin = 3 * math.sqrt(alpha * (1 - alpha) / families)
    assert any_false / families <= alpha + margin
    assert np.mean(false_share) <= alpha + margin


def test_normal_pvalue_matches_the_normal_interval():
    assert normal_pvalue(0.0196, 0.01) == pytest.approx(math.erfc(1.96 / math.sqrt(2)), rel=1e-12)
    assert normal_pvalue(-0.0196, 0.01) == normal_pvalue(0.0196, 0.01)
    rng = np.random.default_rng(4)
    for _ in range(50):
        base = rng.random(60)  # a per-document F1, say (0/1 values get Agresti–Min and McNemar instead)
        variant = base + rng.normal(0.03, 0.1, size=60)
        estimate = paired_mean_stats(list(base), list(variant))
        p = normal_pvalue(estimate.delta, estimate.stderr)
        assert (p < 0.05) == estimate.significant
    assert normal_pvalue(0.1, None) is None
    assert normal_pvalue(float("nan"), 0.1) is None
    assert normal_pvalue(0.1, 0.0) == 0.0 and normal_pvalue(0.0, 0.0) == 1.0


def test_bootstrap_pvalue_counts_the_other_side_with_the_plus_one():
    draws = np.tile([0.3, 0.1, -0.2, 0.0, 0.5, 0.4, 0.2, 0.6, 0.1], 5)  # 10 of 45 on the other side: resolved
    assert bootstrap_pvalue(0.25, draws) == pytest.approx(2 * (1 + 10) / 46)
    assert bootstrap_pvalue(-0.25, -draws) == pytest.approx(2 * (1 + 10) / 46)
    shifted = np.abs(draws) + 1  # none on the other side: the normal tail of the bootstrap SE
    assert bootstrap_pvalue(0.25, shifted) == pytest.approx(2 * stats.norm.sf(0.25 / shifted.std(ddof=1)))
    assert bootstrap_pvalue(0.25, -np.abs(draws) - 1) == 1.0  # capped
    assert bootstrap_pvalue(0.0, draws) == 1.0
    assert bootstrap_pvalue(0.1, [np.nan, 0.2]) is None
    assert bootstrap_pvalue(np.nan, draws) is None


def test_bootstrap_pvalue_agrees_with_the_percentile_interval():
    rng = np.random.default_rng(8)
    for centre in np.linspace(-0.5, 0.5, 21):
        draws = rng.normal(centre, 0.2, size=4000)
        low, high = np.percentile(draws, [2.5, 97.5])
        p = bootstrap_pvalue(float(centre) if centre else 1e-9, draws)
        if low > 0.01 or high < -0.01:
            assert p < 0.05
        if low < -0.01 < 0.01 < high:
            assert p > 0.05


def _bootstrap_means(rng, values, draws=1000):
    """A bootstrap of a mean over documents, as paired_bootstrap resamples them (same draw for both variants)."""
    picks = rng.integers(0, len(values), size=(draws, len(values)))
    return values[picks].mean(axis=1)


def test_a_corpus_metric_p_value_has_the_resolution_holm_needs():
    """A block costing 3.6 paired standard errors, 1,000 draws, Holm over 36 tests: flagged (it used to floor
    at 2/1001 = 0.002, which Holm lifted to 0.07). Under no effect the level holds."""
    rng = np.random.default_rng(26)
    n = 400
    flagged = 0
    for _ in range(20):
        differences = rng.normal(0.0, 1.0, size=n)
        differences += 3.6 * differences.std(ddof=1) / math.sqrt(n) - differences.mean()  # exactly 3.6 SE
        delta = float(differences.mean())
        p = bootstrap_pvalue(delta, _bootstrap_means(rng, differences))
        assert p < 2 / 1001  # below the old floor
        family = [p, *rng.uniform(0.05, 1.0, size=35)]  # 35 blocks that do nothing
        flagged += adjust_pvalues(family, "holm").pvalues[0] < 0.05
    assert flagged == 20
    # No effect: the test keeps its level (the refinement only acts beyond the draws' resolution).
    rejected = 0
    for _ in range(300):
        differences = rng.normal(0.0, 1.0, size=n)
        rejected += bootstrap_pvalue(float(differences.mean()), _bootstrap_means(rng, differences)) < 0.05
    assert 0.02 <= rejected / 300 <= 0.09


def test_beyond_the_draws_the_p_value_is_the_normal_tail_of_the_bootstrap_se():
    draws = np.random.default_rng(3).normal(1.0, 0.2, size=999)  # none at or below 0
    expected = 2 * stats.norm.sf(1.0 / draws.std(ddof=1))
    assert bootstrap_pvalue(1.0, draws) == pytest.approx(expected, rel=1e-12)
    resolved = np.random.default_rng(4).normal(1.0, 0.5, size=999)  # about 23 draws below 0: percentile p
    other = int(np.sum(resolved <= 0))
    assert other >= 10 and bootstrap_pvalue(1.0, resolved) == pytest.approx(2 * (1 + other) / 1000)
