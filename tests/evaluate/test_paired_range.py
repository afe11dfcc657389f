"""ΔP intervals of a comparison with the full model stay inside what the metric can reach."""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

from layerprobe.evaluate import within_range


def test_an_agreement_near_one_on_few_windows_is_cut_at_one():
    # Five windows, four agree everywhere, one on 60 %: the t-interval of the mean passes 1.
    agreement = np.array([1.0, 1.0, 1.0, 1.0, 0.6])
    delta = agreement - 1.0
    half = stats.t.ppf(0.975, len(delta) - 1) * delta.std(ddof=1) / math.sqrt(len(delta))
    raw = [delta.mean() - half, delta.mean() + half]
    assert 1.0 + raw[1] > 1.0  # what was shown before: an agreement above 1
    [cut] = within_range("top1_agreement", 1.0, [raw])
    assert cut == [raw[0], 0.0]
    assert cut[0] <= delta.mean() <= cut[1]  # it still holds its estimate


def test_kl_and_cosine_distance_never_reach_below_zero():
    assert within_range("kl", 0.0, [[-0.01, 0.05], None]) == [[0.0, 0.05], None]
    assert within_range("cosine_distance", 0.0, [[-0.1, 2.5]]) == [[0.0, 2.0]]


def test_a_metric_whose_baseline_is_itself_estimated_is_left_as_it_is():
    assert within_range("acc", 0.9, [[-0.3, 0.2]]) == [[-0.3, 0.2]]
    assert within_range("acc,none", 0.9, [[-0.3, 0.2]]) == [[-0.3, 0.2]]
    assert within_range("nll", 3.0, [[-5.0, 1.0]]) == [[-5.0, 1.0]]
