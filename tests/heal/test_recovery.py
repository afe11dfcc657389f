"""The recovery estimator against a direct computation: the ratio of means and a bootstrap written here."""

from __future__ import annotations

import math

import numpy as np
import pytest

from layerprobe.heal import recovery


def test_recovery_is_the_ratio_of_mean_gains_with_a_window_bootstrap():
    rng = np.random.default_rng(0)
    o = rng.normal(1.0, 0.1, 200)
    p = o + rng.normal(0.5, 0.1, 200)
    h = o + rng.normal(0.2, 0.1, 200)
    found = recovery(o, p, h, draws=300, seed=7)
    assert found.value == np.mean(h - p) / np.mean(o - p)
    generator = np.random.default_rng(7)
    ratios = []
    for _ in range(300):
        index = generator.integers(0, 200, 200)
        ratios.append(np.mean((h - p)[index]) / np.mean((o - p)[index]))
    assert found.ci95 == (np.percentile(ratios, 2.5), np.percentile(ratios, 97.5))
    assert found.ci95[0] <= found.value <= found.ci95[1]
    assert 0.5 < found.value < 0.7


def test_recovery_is_not_defined_when_the_cut_costs_nothing():
    rng = np.random.default_rng(1)
    o = rng.normal(1.0, 0.1, 50)
    p = o + rng.normal(0.0, 0.1, 50)
    found = recovery(o, p, o, draws=50)
    assert not found.defined and found.ci95 is None
    assert "costs nothing measurable" in (found.reason or "")


def test_held_out_intervals_stay_within_what_each_metric_can_be():
    """Two windows near a bound: each interval is cut to the metric's range and still holds its estimate.

    Before the cut, a top-1 agreement of 0.26 on two windows had the interval [-0.03, 0.56] and its
    difference to the original an interval starting below -1: a heal.json its own reader refused.
    """
    from layerprobe.core import Z95
    from layerprobe.heal.held_out import summarise

    values = {
        "original": {"nll": [0.01, 3.0], "kl": [0.0, 0.0], "top1_agreement": [1.0, 1.0]},
        "pruned": {"nll": [0.02, 3.5], "kl": [0.001, 0.9], "top1_agreement": [0.02, 0.5]},
        "healed": {"nll": [0.015, 3.2], "kl": [0.0005, 0.5], "top1_agreement": [0.5, 0.9]},
    }
    summary = summarise(values, draws=200)
    top1 = summary["top1_agreement"]
    mean = (0.02 + 0.5) / 2
    stderr = abs(0.5 - 0.02) / 2  # two values: the sample sd / sqrt(2) is half their distance
    assert mean - Z95 * stderr < 0  # the uncut normal interval leaves [0, 1]
    assert top1["pruned"]["ci95"] == [0.0, pytest.approx(mean + Z95 * stderr, rel=1e-12)]
    assert top1["pruned_delta"]["ci95"][0] >= -1.0 and top1["pruned_delta"]["ci95"][1] <= 0.0
    for metric, entry in summary.items():
        low, high = {"nll": (0, math.inf), "kl": (0, math.inf), "top1_agreement": (0, 1)}[metric]
        for model in ("original", "pruned", "healed"):
            ci, value = entry[model]["ci95"], entry[model]["value"]
            assert low <= ci[0] <= value <= ci[1] <= high, (metric, model, ci)
        for name in ("pruned_delta", "healed_delta", "healed_vs_pruned"):
            ci, value = entry[name]["ci95"], entry[name]["value"]
            assert low - high <= ci[0] <= value <= ci[1] <= high - low, (metric, name, ci)
    assert summary["kl"]["pruned_delta"]["ci95"][0] >= 0.0  # KL of the original is 0: a difference is ≥ 0
