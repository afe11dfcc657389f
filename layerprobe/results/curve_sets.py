"""The sets each pruning strategy chose, in prune_curve.json (`layerprobe/prune-curve@2`).

`methods.<name>` holds one `CurveStrategy`: for every n it chose a set of n units (`RemovedSet`: the
removed `blocks` and the zeroed `sublayers` as [block, "attention"|"mlp"]), every task's and metric's
score of the model without them (`SetScore`, with 95 % intervals), on a generating task the share of
answers that changed (`AnswerFlips`, per filter), and what the search cost. `baseline` holds the full
model's scores (`BaselineScore`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import layerprobe.results.validate as v
from layerprobe.core import Z95
from layerprobe.results.evaluation import STOP_REASONS
from layerprobe.results.json_types import JSONObject, JSONValue
from layerprobe.results.validate import Node

SUBLAYER_KINDS = ("attention", "mlp")
STRATEGY_UNITS = ("block", "sublayer")  # what one unit of a strategy's n is


def normal_ci95(value: float, stderr: float | None) -> list[float] | None:
    """The normal 95 % interval value ± 1.96 stderr; None without a finite stderr."""
    if stderr is None or not math.isfinite(stderr):
        return None
    return [value - Z95 * stderr, value + Z95 * stderr]


@dataclass(frozen=True)
class BaselineScore:
    """One metric of one task on the full model: value, stderr and 95 % interval (value ± 1.96 stderr).

    `items` (sequential runs only): the documents the full model was scored on, every one any set used.
    """

    value: float
    stderr: float | None
    ci95: list[float] | None
    higher_is_better: bool
    items: int | None = None

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"value": self.value, "stderr": self.stderr, "ci95": self.ci95}
        out["higher_is_better"] = self.higher_is_better
        return out if self.items is None else {**out, "items": self.items}

    @classmethod
    def from_dict(cls, node: Node, name: str | None = None) -> BaselineScore:
        """One metric's full-model score (in [0, 1] for a share of answers: `name` acc, exact_match…)."""
        value = node.key("value").number(low=v.score_range(name)[0], high=v.score_range(name)[1])
        return cls(
            value=value,
            stderr=node.key("stderr").number(optional=True, low=0.0),
            ci95=v.interval(node.key("ci95"), estimate=value),
            higher_is_better=node.key("higher_is_better").flag(),
            items=node.key("items").integer(optional=True, minimum=1),
        )


@dataclass(frozen=True)
class SetScore:
    """One metric of one task with a set removed: its score and ΔP = score − baseline, each with a 95 % interval.

    `ci95` is value ± 1.96 stderr; `delta_ci95` the paired interval of ΔP (closed form or paired
    bootstrap, as prune-drop's), None where the documents cannot be paired. A sequential run
    (`--precision`) adds how the set stopped: `items` (documents scored, the first of the seeded
    order), `stop` ("precision", "settled" or "exhausted") and `delta_cs95`, the anytime-valid 95 %
    interval of ΔP it stopped with (`delta_ci95` is then the fixed-n interval on those documents).
    """

    value: float
    stderr: float | None
    ci95: list[float] | None
    delta: float
    delta_stderr: float | None
    delta_ci95: list[float] | None
    items: int | None = None
    stop: str | None = None
    delta_cs95: list[float] | None = None

    @property
    def interval(self) -> list[float] | None:
        """The interval to read ΔP by: the anytime one of a sequential run, else the paired one."""
        return self.delta_cs95 if self.items is not None else self.delta_ci95

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {
            "value": self.value,
            "stderr": self.stderr,
            "ci95": self.ci95,
            "delta": self.delta,
            "delta_stderr": self.delta_stderr,
            "delta_ci95": self.delta_ci95,
        }
        if self.items is not None:
            out |= {"items": self.items, "stop": self.stop, "delta_cs95": self.delta_cs95}
        return out

    @classmethod
    def from_dict(cls, node: Node, name: str | None = None) -> SetScore:
        """One metric of a removed set (its score in [0, 1] for a share of answers: `name` acc, exact_match…)."""
        stop = node.key("stop").text(optional=True)
        if stop is not None and stop not in STOP_REASONS:
            node.key("stop").fail(" or ".join(f'"{r}"' for r in STOP_REASONS), f"got {stop!r}")
        low, high = v.score_range(name)
        value, delta = node.key("value").number(low=low, high=high), node.key("delta").number()
        return cls(
            value=value,
            stderr=node.key("stderr").number(optional=True, low=0.0),
            ci95=v.interval(node.key("ci95"), estimate=value),
            delta=delta,
            delta_stderr=node.key("delta_stderr").number(optional=True, low=0.0),
            delta_ci95=v.interval(node.key("delta_ci95"), estimate=delta),
            items=node.key("items").integer(optional=True, minimum=1),
            stop=stop,
            delta_cs95=v.interval(node.key("delta_cs95"), estimate=delta) if node.key("delta_cs95").given else None,
        )


@dataclass(frozen=True)
class AnswerFlips:
    """One filter of a generating task with a set removed: the answers that differ from the full model's.

    `flips` of `documents` answers (after the filter) changed; `rate` = flips / documents and `ci95` its
    Wilson 95 % interval.
    """

    flips: int
    documents: int
    rate: float
    ci95: list[float]

    def to_dict(self) -> dict[str, object]:
        return {"flips": self.flips, "documents": self.documents, "rate": self.rate, "ci95": list(self.ci95)}

    @classmethod
    def from_dict(cls, node: Node) -> AnswerFlips:
        documents = node.key("documents").integer(minimum=1)
        flips = node.key("flips").integer(minimum=0)
        if flips > documents:
            node.key("flips").fail(f"a count of at most documents = {documents}", f"got {flips}")
        rate = node.key("rate").number(finite=True, low=0.0, high=1.0)
        ci95 = v.interval(node.key("ci95"), 0.0, 1.0, estimate=rate)
        if ci95 is None:
            node.key("ci95").fail("the Wilson 95 % interval [low, high]")
        return cls(flips, documents, rate, ci95)


@dataclass(frozen=True)
class RemovedSet:
    """The units one strategy removes for one n, and every task's and metric's score without them.

    `flip_rate` (generating tasks only): task → filter → how many answers changed against the full model.
    """

    blocks: list[int]
    sublayers: list[tuple[int, str]]
    scores: dict[str, dict[str, SetScore]]
    flip_rate: dict[str, dict[str, AnswerFlips]] = field(default_factory=dict)

    @property
    def size(self) -> int:
        return len(self.blocks) + len(self.sublayers)

    @property
    def start(self) -> int | None:
        """The first block of a span of consecutive blocks (None for any other set)."""
        blocks = self.blocks
        if self.sublayers or not blocks or blocks != list(range(blocks[0], blocks[0] + len(blocks))):
            return None
        return blocks[0]

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {
            "blocks": list(self.blocks),
            "sublayers": [[block, kind] for block, kind in self.sublayers],
            "scores": {t: {m: s.to_dict() for m, s in metrics.items()} for t, metrics in self.scores.items()},
        }
        if self.flip_rate:
            out["flip_rate"] = {
                task: {name: f.to_dict() for name, f in filters.items()} for task, filters in self.flip_rate.items()
            }
        return out

    @classmethod
    def from_dict(cls, node: Node, num_layers: int) -> RemovedSet:
        """Blocks distinct and in 0 … L−1; sublayers [block, "attention"|"mlp"] distinct and in range."""
        blocks = [item.integer(minimum=0) for item in node.key("blocks").items()]
        for i, block in enumerate(blocks):
            if block >= num_layers or block in blocks[:i]:
                node.key("blocks").items()[i].fail(f"a distinct block index in 0 … {num_layers - 1}", f"got {block}")
        sublayers: list[tuple[int, str]] = []
        for item in node.key("sublayers").items():
            pair = item.items()
            if len(pair) != 2:
                item.fail('a pair [block, "attention" or "mlp"]', f"got {len(pair)} items")
            block, kind = pair[0].integer(minimum=0), pair[1].text()
            if block >= num_layers or kind not in SUBLAYER_KINDS or (block, kind) in sublayers:
                expected = f'a distinct [block in 0 … {num_layers - 1}, "attention" or "mlp"]'
                item.fail(expected, f"got [{block}, {kind!r}]")
            sublayers.append((block, kind))
        scores = {
            task: {name: SetScore.from_dict(score, name) for name, score in metrics.entries(min_length=1)}
            for task, metrics in node.key("scores").entries(min_length=1)
        }
        flips = node.key("flip_rate")
        flip_rate = (
            {
                task: {name: AnswerFlips.from_dict(item) for name, item in filters.entries(min_length=1)}
                for task, filters in flips.entries()
            }
            if flips.given
            else {}
        )
        return cls(blocks, sublayers, scores, flip_rate)


@dataclass(frozen=True)
class CurveStrategy:
    """One strategy's choice for every n (`sets`, keyed by n) and what choosing cost (`cost`).

    `unit` is "block" (n blocks removed) or "sublayer" (n attention / MLP sublayers zeroed).
    """

    unit: str
    sets: dict[int, RemovedSet]
    cost: JSONObject = field(default_factory=dict)

    def to_dict(self) -> dict[str, object]:
        return {
            "unit": self.unit,
            "sets": {str(n): s.to_dict() for n, s in sorted(self.sets.items())},
            "cost": dict(self.cost),
        }

    @classmethod
    def from_dict(cls, node: Node, num_layers: int) -> CurveStrategy:
        unit = node.key("unit").text(default="block")
        if unit not in STRATEGY_UNITS:
            node.key("unit").fail('"block" or "sublayer"', f"got {unit!r}")
        per_unit = 1 if unit == "block" else 2
        sets: dict[int, RemovedSet] = {}
        for key, item in node.key("sets").entries(min_length=1):
            if not key.isdigit() or not 1 <= int(key) <= per_unit * num_layers:
                item.fail(f"keyed by a number of units in 1 … {per_unit * num_layers}", f"got key {key!r}")
            chosen = RemovedSet.from_dict(item, num_layers)
            if chosen.size != int(key):
                item.fail(f"a set of {key} units", f"got {chosen.size}")
            sets[int(key)] = chosen
        cost_node = node.key("cost")
        cost: dict[str, JSONValue] = dict(cost_node.obj()) if cost_node.given else {}
        return cls(unit, sets, cost)
