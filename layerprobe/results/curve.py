"""prune_curve.json (`layerprobe/prune-curve@1`): score vs number of consecutive blocks removed, per method.

Per task and metric, one `CurveMethod` per way of choosing the removed span (Gromov et al.'s angular
rule, the last blocks, random spans): for n blocks removed, the span [start, start+n) and its score.
`read_curve_set` reads one method's chosen set for one n (what `prune --from` exports) from this file
or from its successor `layerprobe/prune-curve@2`, whose `methods.<name>.sets.<n>` list the removed
blocks and sublayers of every method.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import TypeVar

from layerprobe.core import ResultError
from layerprobe.results.io import PRUNE_CURVE_SCHEMA, check_schema, read_json, schema_family
from layerprobe.results.json_types import JSONObject, JSONValue, Record
from layerprobe.results.provenance import ModelInfo, RunInfo
from layerprobe.results.validate import Node

POINT_FIELDS = ("n", "start", "score", "stderr", "delta", "delta_stderr")
K = TypeVar("K")
V = TypeVar("V")


@dataclass(frozen=True)
class CurveMethod:
    """One selection method's points: for n blocks removed, the span [start, start+n) and its score.

    `delta_stderr` is the paired stderr of score − baseline (issue #10), None where not pairable.
    """

    n: list[int]
    start: list[int]
    score: list[float]
    stderr: list[float | None]
    delta: list[float]
    delta_stderr: list[float | None]

    def to_dict(self) -> dict[str, object]:
        return {k: list(getattr(self, k)) for k in POINT_FIELDS}

    @classmethod
    def from_dict(cls, data: JSONObject | Node, num_layers: int, source: str = "method") -> CurveMethod:
        """Six parallel arrays (as many points as `n`); each span [start, start+n) inside the `num_layers` blocks."""
        node = Node.of(data, source)
        n = [item.integer(minimum=1) for item in node.key("n").items()]
        start = [item.integer(minimum=0) for item in node.key("start").items()]
        method = cls(
            n=n,
            start=start,
            score=[item.number() for item in node.key("score").items()],
            stderr=[item.number(optional=True) for item in node.key("stderr").items()],
            delta=[item.number() for item in node.key("delta").items()],
            delta_stderr=[item.number(optional=True) for item in node.key("delta_stderr").items()],
        )
        for name in POINT_FIELDS[1:]:
            size = len(getattr(method, name))
            if size != len(n):
                node.key(name).fail(f"an array of {len(n)} items (one per entry of n)", f"got {size} items")
        for i, (count, first) in enumerate(zip(n, start, strict=True)):
            if count > num_layers:
                node.key("n").items()[i].fail(f"a number of blocks in 1 … L = {num_layers}", f"got {count}")
            if first > num_layers - count:
                node.key("start").items()[i].fail(
                    f"a start in 0 … L − n = {num_layers - count} (the span must lie in the {num_layers} blocks)",
                    f"got {first}",
                )
        return method


@dataclass(frozen=True)
class CurveMetric:
    """One metric of one task: the full model's score and each method's points."""

    baseline: float
    baseline_stderr: float | None
    higher_is_better: bool
    methods: dict[str, CurveMethod]

    def to_dict(self) -> dict[str, object]:
        return {
            "baseline": self.baseline,
            "baseline_stderr": self.baseline_stderr,
            "higher_is_better": self.higher_is_better,
            "methods": {k: m.to_dict() for k, m in self.methods.items()},
        }

    @classmethod
    def from_dict(cls, data: JSONObject | Node, num_layers: int, source: str = "metric") -> CurveMetric:
        node = Node.of(data, source)
        return cls(
            baseline=node.key("baseline").number(),
            baseline_stderr=node.key("baseline_stderr").number(optional=True),
            higher_is_better=node.key("higher_is_better").flag(),
            methods={
                name: CurveMethod.from_dict(method, num_layers)
                for name, method in node.key("methods").entries(min_length=1)
            },
        )


@dataclass(frozen=True)
class PruneCurveResult:
    """The pruning curve of one model: per task and metric, one CurveMethod per selection method.

    Attributes:
        settings: tasks, max_fraction, baseline seeds, the angular source, corpus options…
        selection: the angular distances d(x^l, x^(l+n)) of the spans chosen by Gromov's rule, per n.
    """

    model: ModelInfo
    settings: Record
    selection: dict[str, list[JSONValue]]
    tasks: dict[str, dict[str, CurveMetric]]
    run: RunInfo

    @property
    def num_layers(self) -> int:
        return self.model.num_layers

    def to_dict(self) -> dict[str, object]:
        return {
            "schema": PRUNE_CURVE_SCHEMA,
            "model": asdict(self.model),
            "settings": dict(self.settings),
            "selection": dict(self.selection),
            "tasks": {
                task: {name: metric.to_dict() for name, metric in metrics.items()}
                for task, metrics in self.tasks.items()
            },
            "run": asdict(self.run),
        }

    @classmethod
    def from_dict(cls, data: JSONObject, source: str = "prune-curve result") -> PruneCurveResult:
        """Validate every field (spans inside the model's L blocks, parallel point arrays) and build the result.

        Raises:
            ResultError: naming `source` and the JSON path of the first bad field.
        """
        root = Node(data, source)
        check_schema(root, PRUNE_CURVE_SCHEMA)
        model = ModelInfo.from_dict(root.key("model"))
        tasks = {
            task: {
                name: CurveMetric.from_dict(metric, model.num_layers) for name, metric in metrics.entries(min_length=1)
            }
            for task, metrics in root.key("tasks").entries(min_length=1)
        }
        return cls(
            model=model,
            settings=dict(root.key("settings").obj()),
            selection={name: values.array() for name, values in root.key("selection").entries()},
            tasks=tasks,
            run=RunInfo.from_dict(root.key("run")),
        )


# --- one method's set for n, as `prune --from prune_curve.json --method NAME --n K` exports it ----------

SUBLAYER_NAMES = ("attention", "mlp")


@dataclass(frozen=True)
class CurveSet:
    """The units one method chose to remove for n, read from a prune_curve.json.

    `blocks`: whole blocks (0-based); `sublayers`: (block, "attention" | "mlp") removed without the rest of
    their block. `model_id` and `num_layers` say which model the curve was measured on.
    """

    source: str
    method: str
    n: int
    blocks: list[int]
    sublayers: list[tuple[int, str]]
    model_id: str | None
    num_layers: int


def read_curve_set(path: str | os.PathLike[str], method: str, n: int) -> CurveSet:
    """Read `method`'s set for `n` from a prune_curve.json.

    Schema @2: `methods.<name>.sets.<n>` (`blocks`, and `sublayers` as [block, "attention" | "mlp"] pairs).
    An older @1 file holds spans only: the span [start, start + n) a span method (angular, last,
    random_<seed>) chose for n.

    Raises:
        ResultError: the file is not a prune-curve result, or has no such method or n (the line lists
            what it has), or a set names a block outside the model's blocks.
    """
    source = str(path)
    root = Node(read_json(path), source)
    family = schema_family(PRUNE_CURVE_SCHEMA)
    schema = root.obj().get("schema")
    model = root.key("model")
    num_layers = model.key("num_layers").integer(minimum=1)
    model_id = model.key("id").text(optional=True)
    if schema == f"{family}@1":
        spans = _spans_of_v1(root)
        starts = _pick(spans, method, f"{source} has no method {method!r}", "")
        start = _pick(starts, n, f"{source} has no {method} set for n = {n}", "n = ")
        return CurveSet(source, method, n, list(range(start, start + n)), [], model_id, num_layers)
    if schema != f"{family}@2":
        raise ResultError(f"{source}: expected a prune-curve result, got schema {schema!r}.")
    methods = dict(root.key("methods").entries())
    sets = dict(_pick(methods, method, f"{source} has no method {method!r}", "").key("sets").entries())
    chosen = _pick(sets, str(n), f"{source} has no {method} set for n = {n}", "n = ")
    blocks = [item.integer(minimum=0) for item in chosen.key("blocks").items()]
    sublayers = []
    if chosen.key("sublayers").given:
        for item in chosen.key("sublayers").items():
            pair = item.items()
            if len(pair) != 2:
                item.fail('a pair [block, "attention" | "mlp"]', f"got {len(pair)} items")
            kind = pair[1].text()
            if kind not in SUBLAYER_NAMES:
                pair[1].fail('"attention" or "mlp"', f"got {kind!r}")
            sublayers.append((pair[0].integer(minimum=0), kind))
    for block in [*blocks, *(b for b, _ in sublayers)]:
        if block >= num_layers:
            chosen.fail(f"blocks in 0 … {num_layers - 1} (the model has {num_layers})", f"got block {block}")
    return CurveSet(source, method, n, sorted(blocks), sublayers, model_id, num_layers)


def _spans_of_v1(root: Node) -> dict[str, dict[int, int]]:
    """Method → n → start, gathered over every task and metric of a prune-curve@1 file (first seen wins)."""
    spans: dict[str, dict[int, int]] = {}
    for _task, metrics in root.key("tasks").entries():
        for _metric, metric in metrics.entries():
            for name, method in metric.key("methods").entries():
                ns = [item.integer(minimum=1) for item in method.key("n").items()]
                starts = [item.integer(minimum=0) for item in method.key("start").items()]
                for count, start in zip(ns, starts, strict=False):
                    spans.setdefault(name, {}).setdefault(count, start)
    return spans


def _pick(options: Mapping[K, V], wanted: K, missing: str, prefix: str) -> V:
    """`options[wanted]`, or the one line `missing`, listing what there is ("…; it has: n = 1, 2.")."""
    if wanted not in options:
        have = ", ".join(str(k) for k in options)
        raise ResultError(f"{missing}; it has: {prefix}{have}." if have else f"{missing}; it has none.")
    return options[wanted]
