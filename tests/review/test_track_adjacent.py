"""The history's angular statistics against direct computations written here (numpy, float64)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from reference import direct_ratio_stderr

from layerprobe.core import ResultError
from layerprobe.results import load_result
from layerprobe.review.adjacent import (
    independent_mean_stderr,
    lazy_range,
    track_angular,
    windowed_mean_stderr,
)

Z = 1.96


def test_lazy_range_counts_blocks_surely_and_possibly_below():
    adjacent = [0.10, 0.19, 0.21, 0.30, math.nan, 0.05]
    stderr = [0.01, 0.01, 0.01, 0.01, 0.01, math.nan]
    # 0.10 + 0.0196 < 0.2 surely; 0.19 ± 0.0196 straddles; 0.21 − 0.0196 < 0.2 possibly; 0.30 neither;
    # NaN d: neither; NaN stderr: possibly only.
    assert lazy_range(adjacent, stderr, 0.2, Z) == (1, 4)
    assert lazy_range(adjacent, None, 0.2, Z) == (None, None)


def test_windowed_stderr_is_the_ratio_estimator_of_the_per_window_means():
    rng = np.random.default_rng(0)
    windows = 0.2 + 0.05 * rng.standard_normal((40, 6)) + 0.03 * rng.standard_normal((40, 1))  # correlated blocks
    positions = np.r_[np.full(39, 64), 17]  # the last window is short
    mean, se = windowed_mean_stderr(windows.tolist(), positions.tolist(), list(range(6)))
    want_mean, want_se = direct_ratio_stderr(windows, positions)
    assert mean == pytest.approx(want_mean, rel=1e-12) and se == pytest.approx(want_se, rel=1e-12)
    # The blocks share the window effect, so the correct SE exceeds the independent-blocks one here.
    per_block = [direct_ratio_stderr(windows[:, [l]], positions)[1] for l in range(6)]
    assert se > independent_mean_stderr(per_block, list(range(6)))


def test_windowed_stderr_leaves_out_unmeasured_blocks_and_windows():
    rng = np.random.default_rng(1)
    windows = rng.uniform(0.1, 0.3, (12, 4))
    windows[3, 1] = math.nan  # a window with no finite position for block 1
    windows[:, 2] = math.nan  # block 2 never measured: not one of the blocks
    positions = np.full(12, 32)
    mean, se = windowed_mean_stderr(windows.tolist(), positions.tolist(), [0, 1, 3])
    kept = np.delete(windows[:, [0, 1, 3]], 3, axis=0)
    want_mean, want_se = direct_ratio_stderr(kept, np.delete(positions, 3))
    assert mean == pytest.approx(want_mean, rel=1e-12) and se == pytest.approx(want_se, rel=1e-12)
    assert math.isnan(windowed_mean_stderr([[0.1, 0.2]], [8], [0, 1])[1])  # one window: no spread


def test_independent_fallback_is_the_root_sum_of_squares_over_l():
    stderr = [0.003, 0.004, math.nan, 0.012]
    assert independent_mean_stderr(stderr, [0, 1, 3]) == pytest.approx(math.sqrt(0.003**2 + 0.004**2 + 0.012**2) / 3)


@pytest.mark.slow
def test_a_result_with_per_window_values_uses_them(review_runs):
    """The field another change adds to AngularResult, set on a real result: the windowed estimator is used."""
    path = review_runs.by_step[1000] / "angular.json"
    result = load_result(path)
    rng = np.random.default_rng(2)
    windows = np.array(result.summary["adjacent"]) + 0.01 * rng.standard_normal((8, 4))
    positions = [32] * 8
    object.__setattr__(result, "adjacent_windows", windows.tolist())
    object.__setattr__(result, "window_positions", positions)
    got = track_angular(result, Z, str(path))
    _, want_se = direct_ratio_stderr(windows, np.array(positions))
    assert got.stderr_method == "windows" and got.mean_adjacent_stderr == pytest.approx(want_se, rel=1e-12)
    mean = result.summary["mean_adjacent"]
    assert got.mean_adjacent == mean
    assert got.mean_adjacent_ci95 == pytest.approx([mean - Z * want_se, mean + Z * want_se], rel=1e-12)
    object.__setattr__(result, "window_positions", positions[:-1])
    with pytest.raises(ResultError, match="one row of L = 4 values per entry of window_positions"):
        track_angular(result, Z, str(path))


def test_a_result_without_standard_errors_has_no_interval(review_runs):
    result = load_result(review_runs.by_step[1000] / "angular.json")
    object.__setattr__(result, "distance_stderr", None)
    object.__setattr__(result, "adjacent_windows", None)  # a file from before either was recorded
    object.__setattr__(result, "window_positions", None)
    object.__setattr__(result, "summary", result.summarize())
    got = track_angular(result, Z, "angular.json")
    assert got.stderr_method is None and got.mean_adjacent_stderr is None and got.mean_adjacent_ci95 is None
    assert got.surely_below is None and got.possibly_below is None and got.lazy_count == result.summary["lazy_count"]


def test_without_per_window_values_the_mean_assumes_blocks_independent_and_says_so(review_runs):
    result = load_result(review_runs.by_step[1000] / "angular.json")
    object.__setattr__(result, "adjacent_windows", None)  # an angular.json from before they were recorded
    object.__setattr__(result, "window_positions", None)
    got = track_angular(result, Z, "angular.json")
    se = [result.distance_stderr[l][l + 1] for l in range(result.num_layers)]
    independent = math.sqrt(sum(s * s for s in se)) / result.num_layers
    assert got.stderr_method == "assumes blocks independent"
    assert got.mean_adjacent_stderr == pytest.approx(independent, rel=1e-12)


def test_a_precision_run_is_tracked_with_its_anytime_interval():
    """After --precision's data-dependent stop only delta_cs95 holds: track shows it, not delta_ci95."""
    from factories import metric_drop

    from layerprobe.review.track import watched_delta

    metric = metric_drop(
        0.6,
        [0.5, 0.58],
        paired_se=[0.01, 0.01],
        delta_ci95=[[-0.12, -0.08], [-0.04, 0.0]],
        delta_cs95=[[-0.15, -0.05], [-0.07, 0.03]],
    )
    assert watched_delta(metric, 0, 0).delta_ci95 == [-0.15, -0.05]
    fixed = metric_drop(0.6, [0.5, 0.58], paired_se=[0.01, 0.01], delta_ci95=[[-0.12, -0.08], [-0.04, 0.0]])
    assert watched_delta(fixed, 1, 1).delta_ci95 == [-0.04, 0.0]
