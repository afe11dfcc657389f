"""How each prune-curve strategy chooses the n units to remove: the choice rules, free of any model.

A unit is `(block, kind)` with kind "block", "attention" or "mlp"; a set of units (`Variant`) is kept
sorted, so equal sets are equal keys. The rules:

- `angular` (Gromov et al.): the span [l*, l*+n) with l* = argmin_l d(x^l, x^(l+n));
- `last`: the n blocks before the final one, [L-1-n, L-1);
- `random`: per seed, a uniformly drawn span per n;
- `influence` (ShortGPT's block influence): the n blocks with the smallest adjacent distance
  d(x^l, x^(l+1)), wherever they are;
- `delta`: the n units whose single removal hurt the driving metric least;
- `greedy` (SLEB; BlockPruner with sublayers): `greedy.py` removes one unit at a time, re-scoring.

Ties go to the lower block (and attention before MLP); a NaN score or distance ranks last.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence

BLOCK, ATTENTION, MLP = "block", "attention", "mlp"
GROMOV, LAST, INFLUENCE, DELTA, GREEDY, RANDOM = "angular", "last", "influence", "delta", "greedy", "random"
Unit = tuple[int, str]  # (block, "block" | "attention" | "mlp")
Variant = tuple[Unit, ...]  # sorted units removed together; () is the full model
_KIND_ORDER = {BLOCK: 0, ATTENTION: 1, MLP: 2}


def unit_key(unit: Unit) -> tuple[int, int]:
    """The order of units: by block, then attention before MLP."""
    return unit[0], _KIND_ORDER[unit[1]]


def variant_of(units: Sequence[Unit]) -> Variant:
    """A set of units as a key: distinct and sorted."""
    return tuple(sorted(set(units), key=unit_key))


def blocks_variant(blocks: Sequence[int]) -> Variant:
    """Whole blocks removed, as a variant."""
    return variant_of([(b, BLOCK) for b in blocks])


def block_candidates(num_layers: int) -> list[Unit]:
    """Every block as a unit."""
    return [(b, BLOCK) for b in range(num_layers)]


def sublayer_candidates(num_layers: int) -> list[Unit]:
    """Every attention and every MLP sublayer, block by block."""
    return [(b, kind) for b in range(num_layers) for kind in (ATTENTION, MLP)]


def random_seed_method(seed: int) -> str:
    """The name a random draw is recorded under (`random_1234`; shown as "random (seed 1234)")."""
    return f"{RANDOM}_{seed}"


def gromov_start(distance: list[list[float]], n: int) -> int:
    """l* = argmin_l d(x^l, x^(l+n)) over l = 0 … L-n (the first on ties)."""
    size = len(distance) - 1
    return min(range(size - n + 1), key=lambda l: (_rank_value(distance[l][l + n]), l))


def last_starts(size: int, max_n: int) -> dict[int, int]:
    """N → start of the n blocks before the final one, [L-1-n, L-1), for n = 1 … min(max_n, L-1)."""
    return {n: size - 1 - n for n in range(1, min(max_n, size - 1) + 1)}


def random_starts(size: int, max_n: int, seed: int) -> dict[int, int]:
    """N → start of a span drawn uniformly from the L-n+1 spans of n blocks (one generator per seed)."""
    rng = random.Random(seed)
    return {n: rng.randrange(size - n + 1) for n in range(1, max_n + 1)}


def choose_spans(distance: list[list[float]], max_n: int, seeds: list[int]) -> dict[str, dict[int, int]]:
    """Method → n → start of the removed span, for Gromov's rule, the last-blocks baseline and each seed."""
    size = len(distance) - 1
    methods: dict[str, dict[int, int]] = {GROMOV: {n: gromov_start(distance, n) for n in range(1, max_n + 1)}}
    methods[LAST] = last_starts(size, max_n)
    for seed in seeds:
        methods[random_seed_method(seed)] = random_starts(size, max_n, seed)
    return methods


def span_sets(starts: Mapping[int, int]) -> dict[int, Variant]:
    """N → the span [start, start+n) as a set of blocks."""
    return {n: blocks_variant(range(start, start + n)) for n, start in sorted(starts.items())}


def influence_order(distance: list[list[float]]) -> list[int]:
    """Blocks by adjacent angular distance d(x^l, x^(l+1)), smallest first (ShortGPT's block influence)."""
    size = len(distance) - 1
    return sorted(range(size), key=lambda l: (_rank_value(distance[l][l + 1]), l))


def least_harm_order(scores: Mapping[Unit, float], higher_is_better: bool) -> list[Unit]:
    """Units by the score of the model without each alone, the least harmful (best score) first."""
    sign = -1.0 if higher_is_better else 1.0
    return sorted(scores, key=lambda u: (_rank_value(sign * scores[u]), unit_key(u)))


def nested_sets(order: Sequence[Unit], max_n: int) -> dict[int, Variant]:
    """For n = 1 … min(max_n, len(order)): n → the first n units of `order`."""
    return {n: variant_of(order[:n]) for n in range(1, min(max_n, len(order)) + 1)}


def best_candidate(scores: Mapping[Unit, float], higher_is_better: bool) -> Unit:
    """The unit whose removal (on top of those already removed) leaves the best score."""
    return least_harm_order(scores, higher_is_better)[0]


def _rank_value(value: float) -> float:
    """A value to sort by, smallest first: NaN ranks after every number."""
    return math.inf if math.isnan(value) else value
