"""The recovery estimator against a direct computation: the ratio of means and a bootstrap written here."""

from __future__ import annotations

import numpy as np

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
