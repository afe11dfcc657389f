"""stats/ranking.py against scipy's rank correlations, direct set computations, and the bootstrap's moments."""

import numpy as np
import pytest
from scipy import stats

from layerprobe.stats.paired import spearman
from layerprobe.stats.ranking import (
    BlockScores,
    expected_lowest_k_jaccard,
    kendall_tau_b,
    kendall_tau_b_rows,
    lowest_k_jaccard,
    ranking_stability,
    spearman_rho,
    spearman_rho_rows,
)


def tied_scores(rng, blocks):
    return np.round(rng.random(blocks), 1)  # one decimal: plenty of ties


@pytest.mark.parametrize("blocks", [2, 3, 7, 24, 61])
def test_rank_correlations_match_scipy(blocks):
    rng = np.random.default_rng(blocks)
    for _ in range(10):
        x, y = tied_scores(rng, blocks), tied_scores(rng, blocks)
        if np.ptp(x) == 0 or np.ptp(y) == 0:
            continue
        assert kendall_tau_b(x, y) == pytest.approx(stats.kendalltau(x, y).statistic, abs=1e-12)
        assert spearman_rho(x, y) == pytest.approx(stats.spearmanr(x, y).statistic, abs=1e-12)
        assert spearman_rho(x, y) == pytest.approx(spearman(list(x), list(y)), abs=1e-12)


def test_rows_are_computed_independently():
    rng = np.random.default_rng(3)
    x, y = rng.random((300, 16)), rng.random((300, 16))
    x[5] = 1.0  # a constant row: undefined
    taus, rhos = kendall_tau_b_rows(x, y), spearman_rho_rows(x, y)
    assert np.isnan(taus[5]) and np.isnan(rhos[5])
    for row in (0, 130, 299):
        assert taus[row] == pytest.approx(stats.kendalltau(x[row], y[row]).statistic, abs=1e-12)
        assert rhos[row] == pytest.approx(stats.spearmanr(x[row], y[row]).statistic, abs=1e-12)
    assert kendall_tau_b([1, 1, 1], [1, 2, 3]) is None and spearman_rho([1, 2, 3], [4, 4, 4]) is None
    with pytest.raises(ValueError, match="same blocks"):
        kendall_tau_b([1, 2], [1, 2, 3])


def lowest(scores, k):
    return set(sorted(range(len(scores)), key=lambda i: (scores[i], i))[:k])


@pytest.mark.parametrize("blocks", [2, 5, 12, 33])
def test_jaccard_of_the_lowest_blocks_matches_sets(blocks):
    rng = np.random.default_rng(blocks)
    for _ in range(10):
        x, y = tied_scores(rng, blocks), tied_scores(rng, blocks)
        expected = [
            len(lowest(x, k) & lowest(y, k)) / len(lowest(x, k) | lowest(y, k)) for k in range(1, blocks // 2 + 1)
        ]
        assert lowest_k_jaccard(x, y) == pytest.approx(tuple(expected), abs=1e-15)
    assert lowest_k_jaccard([3, 1, 2, 0], [0, 1, 2, 3]) == (0.0, 1 / 3)


def calibration(rng, windows, blocks=12, noise=0.3):
    """Per-window values around a fixed per-block profile: (windows, blocks)."""
    profile = np.linspace(0.1, 0.5, blocks)[rng.permutation(blocks)]
    return profile + noise * rng.standard_normal((windows, blocks))


def test_window_bootstrap_moments_and_labels():
    rng = np.random.default_rng(4)
    values = calibration(rng, 400)
    side = BlockScores.from_windows(values)
    redrawn = side.redraw(np.random.default_rng(0), 4000)
    assert redrawn.mean(axis=0) == pytest.approx(values.mean(axis=0), abs=0.01)
    assert redrawn.std(axis=0) == pytest.approx(values.std(axis=0) / np.sqrt(400), rel=0.1)
    other = BlockScores.from_normal(values.mean(axis=0), values.std(axis=0, ddof=1) / np.sqrt(400))
    normal = other.redraw(np.random.default_rng(0), 4000)
    assert normal.std(axis=0) == pytest.approx(other.stderr, rel=0.1)
    assert ranking_stability(side, side, draws=50).method == "bootstrap"
    assert ranking_stability(other, other, draws=50).method == "parametric_bootstrap"
    assert ranking_stability(side, other, draws=50).method == "mixed_bootstrap"


def test_same_data_agrees_perfectly_and_noise_widens_the_intervals():
    rng = np.random.default_rng(5)
    blocks = 12
    same = BlockScores.from_windows(calibration(rng, 300, blocks))
    perfect = ranking_stability(same, same, draws=200)
    assert perfect.tau == 1.0 and perfect.rho == 1.0 and perfect.jaccard == (1.0,) * (blocks // 2)
    assert perfect.tau_ci[1] <= 1.0 and len(perfect.jaccard_ci) == blocks // 2

    def pair(windows, noise):
        seed_rng = np.random.default_rng(9)
        profile_rng = np.random.default_rng(10)
        profile = np.linspace(0.1, 0.5, blocks)[profile_rng.permutation(blocks)]
        sides = [profile + noise * seed_rng.standard_normal((windows, blocks)) for _ in range(2)]
        return ranking_stability(*(BlockScores.from_windows(s) for s in sides), draws=400, seed=1)

    quiet, noisy = pair(2000, 0.2), pair(100, 0.6)
    assert quiet.tau > noisy.tau
    assert quiet.tau_ci[1] - quiet.tau_ci[0] < noisy.tau_ci[1] - noisy.tau_ci[0]
    assert quiet.tau_ci[0] <= quiet.tau <= quiet.tau_ci[1]
    assert quiet.rho_ci[0] <= quiet.rho <= quiet.rho_ci[1]


def test_seeded_and_deterministic():
    rng = np.random.default_rng(6)
    first = BlockScores.from_windows(calibration(rng, 80))
    second = BlockScores.from_normal(rng.random(12), np.full(12, 0.05))
    one = ranking_stability(first, second, draws=300, seed=3)
    assert one == ranking_stability(first, second, draws=300, seed=3)
    assert one != ranking_stability(first, second, draws=300, seed=4)
    fields = one.to_dict()
    assert fields["method"] == "mixed_bootstrap" and len(fields["jaccard_lowest_k_ci95"]) == 6
    assert fields["kendall_tau_b_ci95"] == list(one.tau_ci)


def test_invalid_input_is_refused():
    with pytest.raises(ValueError, match="windows"):
        BlockScores.from_windows([[1.0, 2.0]])
    with pytest.raises(ValueError, match="finite"):
        BlockScores.from_windows([[1.0, np.nan], [1.0, 2.0]])
    with pytest.raises(ValueError, match="same shape"):
        BlockScores.from_normal([1.0, 2.0], [0.1])
    with pytest.raises(ValueError, match="nonnegative"):
        BlockScores.from_normal([1.0, 2.0], [0.1, -0.1])
    side = BlockScores.from_normal([1.0, 2.0, 3.0], [0.1, 0.1, 0.1])
    with pytest.raises(ValueError, match="different numbers"):
        ranking_stability(side, BlockScores.from_normal([1.0, 2.0], [0.1, 0.1]))
    with pytest.raises(ValueError, match="two draws"):
        ranking_stability(side, side, draws=1)


def brute_force_expected_jaccard(x, y):
    """The mean lowest-k Jaccard over every tie-break of both sides, enumerated (independent of the code)."""
    import itertools

    def tie_breaks(scores):
        return [
            p
            for p in itertools.permutations(range(len(scores)))
            if all(scores[p[i]] <= scores[p[i + 1]] for i in range(len(p) - 1))
        ]

    blocks = len(x)
    totals = np.zeros(blocks // 2)
    count = 0
    for px in tie_breaks(x):
        for py in tie_breaks(y):
            for k in range(1, blocks // 2 + 1):
                a, b = set(px[:k]), set(py[:k])
                totals[k - 1] += len(a & b) / len(a | b)
            count += 1
    return totals / count


@pytest.mark.parametrize(
    ("x", "y"),
    [
        ([0, 0, 1, 2, 2, 3], [0, 1, 0, 2, 3, 3]),
        ([1, 1, 1, 1, 1], [0, 0, 0, 0, 0]),
        ([0, 0, 0, 1, 1, 1], [5, 4, 3, 2, 1, 0]),
    ],
)
def test_tied_rankings_overlap_as_their_random_tie_breaks_do(x, y):
    """The point Jaccard is the mean over tie-breaks, not the lower-index tie-break (which gives J = 1 here)."""
    expected = brute_force_expected_jaccard(x, y)
    found = expected_lowest_k_jaccard(x, y, np.random.default_rng(0))
    assert found == pytest.approx(tuple(expected), abs=0.02)


def test_all_tied_rankings_overlap_by_chance_not_perfectly():
    from layerprobe.stats import lowest_k_jaccard_chance

    blocks = 10
    x, y = np.zeros(blocks), np.zeros(blocks)
    assert lowest_k_jaccard(x, y) == (1.0,) * (blocks // 2)  # what the index tie-break manufactured
    found = expected_lowest_k_jaccard(x, y, np.random.default_rng(1))
    assert found == pytest.approx(lowest_k_jaccard_chance(blocks), abs=0.02)


def test_without_ties_the_expected_overlap_is_the_overlap():
    rng = np.random.default_rng(3)
    x, y = rng.permutation(12).astype(float), rng.permutation(12).astype(float)
    assert expected_lowest_k_jaccard(x, y, rng) == lowest_k_jaccard(x, y)


def test_stability_intervals_hold_their_point_values():
    # Two identical orderings: tau = rho = 1 and every noisy draw below it (seen: tau 1.0 [-0.2, 0.87]).
    rng = np.random.default_rng(12)
    mean = np.sort(rng.uniform(0, 1, 6))
    first = BlockScores.from_normal(mean, np.full(6, 0.15))
    second = BlockScores.from_normal(mean + rng.normal(0, 0.01, 6), np.full(6, 0.15))
    got = ranking_stability(first, second, draws=200, seed=1)
    assert got.tau == 1.0 and got.rho == 1.0
    assert got.tau_ci[1] == 1.0 and got.tau_ci[0] < 1.0
    for point, interval in [
        (got.tau, got.tau_ci),
        (got.rho, got.rho_ci),
        *zip(got.jaccard, got.jaccard_ci, strict=True),
    ]:
        assert interval[0] <= point <= interval[1]
