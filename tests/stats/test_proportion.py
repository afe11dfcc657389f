"""stats/proportion.py: the Wilson interval against scipy's, at the edges and in between."""

import pytest
from scipy import stats

from layerprobe.stats import wilson_interval


@pytest.mark.parametrize(("k", "n"), [(0, 1), (0, 50), (3, 20), (10, 20), (50, 50), (7, 1319)])
def test_wilson_interval_equals_scipys(k, n):
    want = stats.binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
    assert wilson_interval(k, n) == pytest.approx((want.low, want.high), abs=1e-12)


def test_no_trials_no_interval_and_bad_counts_refused():
    assert wilson_interval(0, 0) is None
    with pytest.raises(ValueError):
        wilson_interval(3, 2)
