"""The choice rules of prune-curve's strategies, against choices computed here from their definitions."""

from __future__ import annotations

import math
import random

import numpy as np
from factories import banded_distances

from layerprobe.prune.strategies import (
    best_candidate,
    block_candidates,
    influence_order,
    last_starts,
    least_harm_order,
    nested_sets,
    random_starts,
    span_sets,
    sublayer_candidates,
    variant_of,
)


def test_influence_is_the_argsort_of_adjacent_distances():
    rng = np.random.default_rng(3)
    m = banded_distances(8, {})
    adjacent = rng.uniform(0.05, 0.4, size=8)
    for l, value in enumerate(adjacent):
        m[l][l + 1] = m[l + 1][l] = float(value)
    assert influence_order(m) == list(np.argsort(adjacent, kind="stable"))
    sets = nested_sets([(b, "block") for b in influence_order(m)], 4)
    for n, chosen in sets.items():
        assert [b for b, _ in chosen] == sorted(np.argsort(adjacent, kind="stable")[:n].tolist())  # non-contiguous


def test_influence_ranks_a_nan_distance_last_and_breaks_ties_by_block():
    m = banded_distances(4, {(0, 1): 0.2, (1, 2): 0.2, (2, 3): 0.1, (3, 4): 0.3})
    m[3][4] = m[4][3] = math.nan
    assert influence_order(m) == [2, 0, 1, 3]


def test_least_harm_follows_the_metric_direction():
    scores = {(0, "block"): 0.50, (1, "block"): 0.70, (2, "block"): 0.60, (3, "block"): 0.70}
    assert least_harm_order(scores, higher_is_better=True) == [(1, "block"), (3, "block"), (2, "block"), (0, "block")]
    assert least_harm_order(scores, higher_is_better=False)[0] == (0, "block")
    assert best_candidate({(1, "mlp"): 2.0, (1, "attention"): 2.0}, higher_is_better=False) == (1, "attention")
    assert best_candidate({(0, "block"): math.nan, (1, "block"): 9.0}, higher_is_better=False) == (1, "block")


def test_spans_last_and_random():
    assert last_starts(6, 3) == {1: 4, 2: 3, 3: 2}
    assert last_starts(2, 2) == {1: 0}  # never the final block
    draws = random_starts(6, 3, 7)
    rng = random.Random(7)
    assert draws == {n: rng.randrange(6 - n + 1) for n in (1, 2, 3)}
    assert span_sets({2: 1}) == {2: ((1, "block"), (2, "block"))}


def test_candidates_and_sets_are_sorted_keys():
    assert block_candidates(2) == [(0, "block"), (1, "block")]
    assert sublayer_candidates(2) == [(0, "attention"), (0, "mlp"), (1, "attention"), (1, "mlp")]
    assert variant_of([(1, "mlp"), (0, "mlp"), (1, "attention"), (0, "mlp")]) == (
        (0, "mlp"),
        (1, "attention"),
        (1, "mlp"),
    )
