"""stats/ranking.py's additions for `stability`: weighted windows, recorded points, the chance overlap.

Weighted windows (a short last window) are checked against a direct implementation of the ratio
bootstrap with the same generator calls; the chance Jaccard against an exhaustive enumeration.
"""

import numpy as np
import pytest
from reference import chance_by_enumeration

from layerprobe.stats import BlockScores, lowest_k_jaccard_chance, ranking_stability
from layerprobe.stats.ranking import CHUNK


def windows(rng, count=40, blocks=6):
    return rng.random((count, blocks)) * 0.3 + np.linspace(0.05, 0.3, blocks)


def test_weighted_point_is_the_positions_weighted_mean():
    rng = np.random.default_rng(0)
    values, weights = windows(rng), rng.integers(1, 64, size=40)
    side = BlockScores.from_windows(values, weights)
    expected = [sum(w * v[l] for w, v in zip(weights, values, strict=True)) / weights.sum() for l in range(6)]
    assert side.point == pytest.approx(expected, rel=1e-14)
    # Equal weights are the plain mean, and a given point is kept as given.
    assert BlockScores.from_windows(values, np.ones(40)).point == pytest.approx(values.mean(axis=0), rel=1e-14)
    recorded = np.arange(6.0)
    assert list(BlockScores.from_windows(values, weights, point=recorded).point) == list(recorded)


def test_weighted_redraw_is_the_ratio_over_the_drawn_windows():
    rng = np.random.default_rng(1)
    values, weights = windows(rng, count=30), rng.integers(1, 9, size=30).astype(float)
    draws = 2 * CHUNK + 17  # several chunks, the last one partial
    redrawn = BlockScores.from_windows(values, weights).redraw(np.random.default_rng(7), draws)
    direct = np.random.default_rng(7)
    expected = []
    for start in range(0, draws, CHUNK):
        counts = direct.multinomial(30, np.full(30, 1 / 30), size=min(CHUNK, draws - start))
        for row in counts:
            drawn = np.repeat(np.arange(30), row)  # each window as often as it was drawn
            expected.append((weights[drawn, None] * values[drawn]).sum(axis=0) / weights[drawn].sum())
    assert redrawn == pytest.approx(np.array(expected), rel=1e-12)


def test_unweighted_windows_draw_exactly_as_before():
    rng = np.random.default_rng(2)
    values = windows(rng)
    plain = BlockScores.from_windows(values).redraw(np.random.default_rng(3), 300)
    counts_rng = np.random.default_rng(3)
    counts = np.concatenate(
        [counts_rng.multinomial(40, np.full(40, 1 / 40), size=min(CHUNK, 300 - s)) for s in range(0, 300, CHUNK)]
    )
    assert plain == pytest.approx(counts @ values / 40, rel=1e-13)


def test_weights_and_points_are_checked():
    values = np.ones((3, 4)) + np.arange(4)
    for bad in ([1, 2], [1, 0, 2], [1, np.nan, 2], [1, -1, 2]):
        with pytest.raises(ValueError, match="weights"):
            BlockScores.from_windows(values, bad)
    with pytest.raises(ValueError, match="recorded scores"):
        BlockScores.from_windows(values, point=[1.0, 2.0])
    with pytest.raises(ValueError, match="recorded scores"):
        BlockScores.from_windows(values, point=[1.0, 2.0, np.inf, 0.0])


def test_recorded_point_drives_the_statistics_and_the_windows_the_intervals():
    rng = np.random.default_rng(4)
    values = windows(rng)
    recorded = values.mean(axis=0)[::-1].copy()  # a different ordering than the windows' mean
    side = BlockScores.from_windows(values, point=recorded)
    found = ranking_stability(side, BlockScores.from_windows(values), draws=50)
    assert found.tau == -1.0 and found.rho == -1.0  # points: reversed orders
    # The draws (the same windows, so agreeing) give the interval; widened to hold its own estimate, the
    # recorded point, it spans both: it never leaves out the number it is printed beside.
    assert found.tau_ci is not None and found.tau_ci[0] <= found.tau and found.tau_ci[1] > 0


@pytest.mark.parametrize("blocks", [2, 3, 6, 9])
def test_chance_overlap_matches_enumeration(blocks):
    expected = [chance_by_enumeration(blocks, k) for k in range(1, blocks // 2 + 1)]
    assert lowest_k_jaccard_chance(blocks) == pytest.approx(expected, rel=1e-12)
    assert lowest_k_jaccard_chance(blocks)[0] == pytest.approx(1 / blocks, rel=1e-12)  # k = 1: the same block
    with pytest.raises(ValueError):
        lowest_k_jaccard_chance(1)
