"""prune_curve.json: score vs number of units removed, per strategy of choosing them.

`layerprobe/prune-curve@2` (written now) records per strategy (`methods.<name>`, see `curve_sets.py`)
the set it chose for every n and every task's and metric's score without it, with 95 % intervals, and
the full model's scores (`baseline`). `layerprobe/prune-curve@1` (older files, still read) held per task
and metric one `CurveMethod` per strategy: for n consecutive blocks removed, the span [start, start+n)
and its score. Both read into a `PruneCurveResult`, whose `tasks` gives the per-metric curves the plots
and `track` draw.
`read_curve_set` reads one strategy's chosen set for one n (what `prune --from` exports) from either.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import TypeVar

from layerprobe.core import ResultError
from layerprobe.results.curve_sets import BaselineScore, CurveStrategy, RemovedSet, SetScore, normal_ci95
from layerprobe.results.io import PRUNE_CURVE_SCHEMA, PRUNE_CURVE_SCHEMA_V1, check_schema, read_json, schema_family
from layerprobe.results.json_types import JSONObject, JSONValue, Record
from layerprobe.results.provenance import ModelInfo, RunInfo
from layerprobe.results.validate import Node

POINT_FIELDS = ("n", "start", "score", "stderr", "delta", "delta_stderr")
K = TypeVar("K")
V = TypeVar("V")


@dataclass(frozen=True)
class CurveMethod:
    """One strategy's points for one metric: for n units removed, the score and ΔP = score − baseline.

    `start` is the first block of the removed span where the set is one (None for any other set);
    `delta_stderr` is the paired stderr of ΔP, None where not pairable; `delta_ci95` its 95 % interval.
    `units_per_block` is 2 for a strategy that removes sublayers (n counts attention and MLP sublayers).
    """

    n: list[int]
    start: list[int | None]
    score: list[float]
    stderr: list[float | None]
    delta: list[float]
    delta_stderr: list[float | None]
    delta_ci95: list[list[float] | None] | None = None
    units_per_block: int = 1

    def fractions(self, num_layers: int) -> list[float]:
        """Each point's fraction of the stack removed (a sublayer counts half a block)."""
        return [n / (self.units_per_block * num_layers) for n in self.n]

    def to_dict(self) -> dict[str, object]:
        """The `layerprobe/prune-curve@1` form of the points."""
        return {k: list(getattr(self, k)) for k in POINT_FIELDS}

    @classmethod
    def from_dict(cls, data: JSONObject | Node, num_layers: int, source: str = "method") -> CurveMethod:
        """Six parallel arrays (as many points as `n`); each span [start, start+n) inside the `num_layers` blocks."""
        node = Node.of(data, source)
        n = [item.integer(minimum=1) for item in node.key("n").items()]
        start: list[int | None] = [item.integer(minimum=0) for item in node.key("start").items()]
        method = cls(
            n=n,
            start=start,
            score=[item.number() for item in node.key("score").items()],
            stderr=[item.number(optional=True, low=0.0) for item in node.key("stderr").items()],
            delta=[item.number() for item in node.key("delta").items()],
            delta_stderr=[item.number(optional=True, low=0.0) for item in node.key("delta_stderr").items()],
        )
        for name in POINT_FIELDS[1:]:
            size = len(getattr(method, name))
            if size != len(n):
                node.key(name).fail(f"an array of {len(n)} items (one per entry of n)", f"got {size} items")
        for i, (count, first) in enumerate(zip(n, start, strict=True)):
            if count > num_layers:
                node.key("n").items()[i].fail(f"a number of blocks in 1 … L = {num_layers}", f"got {count}")
            if first is not None and first > num_layers - count:
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
        """The `layerprobe/prune-curve@1` form of the metric."""
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
            baseline_stderr=node.key("baseline_stderr").number(optional=True, low=0.0),
            higher_is_better=node.key("higher_is_better").flag(),
            methods={
                name: CurveMethod.from_dict(method, num_layers)
                for name, method in node.key("methods").entries(min_length=1)
            },
        )


@dataclass(frozen=True)
class PruneCurveResult:
    """The pruning curve of one model: per strategy, the set chosen for every n and its scores.

    Attributes:
        settings: tasks, methods, the metric that drove the choice, max_fraction, seeds, sources, corpus…
        selection: the angular distances d(x^l, x^(l+n)) of the spans chosen by Gromov's rule, per n.
        baseline: task → metric → the full model's score.
        methods: strategy name → its sets and search cost, in the order they were run.
    """

    model: ModelInfo
    settings: Record
    selection: dict[str, list[JSONValue]]
    baseline: dict[str, dict[str, BaselineScore]]
    methods: dict[str, CurveStrategy]
    run: RunInfo

    @property
    def num_layers(self) -> int:
        return self.model.num_layers

    def answer_filters(self, task: str) -> list[str]:
        """The filters of a generating task whose changed answers were counted (empty for any other task)."""
        sets = [chosen for strategy in self.methods.values() for chosen in strategy.sets.values()]
        return list(dict.fromkeys(name for chosen in sets for name in chosen.flip_rate.get(task, {})))

    def shown_metric(self, task: str) -> str:
        """The metric a figure or table shows for `task`: the one that drove the choice, else the primary one."""
        driver = self.settings.get("metric")
        if isinstance(driver, dict) and driver.get("task") == task and driver.get("metric") in self.baseline[task]:
            return str(driver["metric"])
        return next(iter(self.baseline[task]))

    @property
    def tasks(self) -> dict[str, dict[str, CurveMetric]]:
        """Task → metric → each strategy's curve (n sorted), as the plots and `track` draw it."""
        out: dict[str, dict[str, CurveMetric]] = {}
        for task, metrics in self.baseline.items():
            out[task] = {}
            for name, base in metrics.items():
                curves = {}
                for method, strategy in self.methods.items():
                    sets = sorted(strategy.sets.items())
                    scores = [s.scores[task][name] for _, s in sets]
                    curves[method] = CurveMethod(
                        n=[n for n, _ in sets],
                        start=[s.start for _, s in sets],
                        score=[p.value for p in scores],
                        stderr=[p.stderr for p in scores],
                        delta=[p.delta for p in scores],
                        delta_stderr=[p.delta_stderr for p in scores],
                        delta_ci95=[p.interval for p in scores],  # a sequential run's: anytime
                        units_per_block=1 if strategy.unit == "block" else 2,
                    )
                out[task][name] = CurveMetric(base.value, base.stderr, base.higher_is_better, curves)
        return out

    def to_dict(self) -> dict[str, object]:
        return {
            "schema": PRUNE_CURVE_SCHEMA,
            "model": asdict(self.model),
            "settings": dict(self.settings),
            "selection": dict(self.selection),
            "baseline": {t: {m: b.to_dict() for m, b in metrics.items()} for t, metrics in self.baseline.items()},
            "methods": {name: m.to_dict() for name, m in self.methods.items()},
            "run": asdict(self.run),
        }

    @classmethod
    def from_curves(
        cls,
        model: ModelInfo,
        settings: Record,
        selection: dict[str, list[JSONValue]],
        tasks: dict[str, dict[str, CurveMetric]],
        run: RunInfo,
    ) -> PruneCurveResult:
        """A result from `layerprobe/prune-curve@1` curves: every point a span [start, start+n) of blocks."""
        baseline = {
            task: {
                name: BaselineScore(m.baseline, m.baseline_stderr, normal_ci95(m.baseline, m.baseline_stderr), hib)
                for name, m in metrics.items()
                for hib in (m.higher_is_better,)
            }
            for task, metrics in tasks.items()
        }
        spans: dict[str, dict[int, int | None]] = {}
        scores: dict[str, dict[int, dict[str, dict[str, SetScore]]]] = {}
        for task, metrics in tasks.items():
            for name, metric in metrics.items():
                for method, points in metric.methods.items():
                    for i, n in enumerate(points.n):
                        spans.setdefault(method, {})[n] = points.start[i]
                        score = SetScore(
                            points.score[i],
                            points.stderr[i],
                            normal_ci95(points.score[i], points.stderr[i]),
                            points.delta[i],
                            points.delta_stderr[i],
                            normal_ci95(points.delta[i], points.delta_stderr[i]),
                        )
                        scores.setdefault(method, {}).setdefault(n, {}).setdefault(task, {})[name] = score
        methods = {
            method: CurveStrategy(
                "block",
                {
                    n: RemovedSet([] if start is None else list(range(start, start + n)), [], scores[method][n])
                    for n, start in sorted(per_n.items())
                },
            )
            for method, per_n in spans.items()
        }
        return cls(model, settings, selection, baseline, methods, run)

    @classmethod
    def from_dict(cls, data: JSONObject, source: str = "prune-curve result") -> PruneCurveResult:
        """Validate every field (sets inside the model's L blocks, every set scored on every metric) and build it.

        Reads `layerprobe/prune-curve@2` and the older `@1` (see the module docstring).

        Raises:
            ResultError: naming `source` and the JSON path of the first bad field.
        """
        root = Node(data, source)
        if root.obj().get("schema") == PRUNE_CURVE_SCHEMA_V1:
            return _from_v1(root)
        check_schema(root, PRUNE_CURVE_SCHEMA)
        model = ModelInfo.from_dict(root.key("model"))
        baseline = {
            task: {name: BaselineScore.from_dict(metric, name) for name, metric in metrics.entries(min_length=1)}
            for task, metrics in root.key("baseline").entries(min_length=1)
        }
        methods = {
            name: CurveStrategy.from_dict(method, model.num_layers)
            for name, method in root.key("methods").entries(min_length=1)
        }
        for name, method in methods.items():
            for n, chosen in method.sets.items():
                for task, metrics in baseline.items():
                    missing = [m for m in metrics if m not in chosen.scores.get(task, {})]
                    if missing:
                        where = root.key("methods").key(name).key("sets").key(str(n)).key("scores")
                        where.fail(f"a score of every baseline metric of {task}", f"{missing} missing")
        return cls(
            model=model,
            settings=dict(root.key("settings").obj()),
            selection={name: values.array() for name, values in root.key("selection").entries()},
            baseline=baseline,
            methods=methods,
            run=RunInfo.from_dict(root.key("run")),
        )


def curves_to_v1(result: PruneCurveResult) -> dict[str, object]:
    """The `layerprobe/prune-curve@1` document of a result whose every set is a span of blocks (for tests and tools)."""
    return {
        "schema": PRUNE_CURVE_SCHEMA_V1,
        "model": asdict(result.model),
        "settings": dict(result.settings),
        "selection": dict(result.selection),
        "tasks": {t: {name: m.to_dict() for name, m in metrics.items()} for t, metrics in result.tasks.items()},
        "run": asdict(result.run),
    }


def method_label(name: str) -> str:
    """A strategy's name as a reader sees it: `random_1234` → "random (seed 1234)"; others unchanged."""
    head, _, seed = name.rpartition("_")
    return f"{head} (seed {seed})" if head == "random" and seed.isdigit() else name


def _from_v1(root: Node) -> PruneCurveResult:
    model = ModelInfo.from_dict(root.key("model"))
    tasks = {
        task: {name: CurveMetric.from_dict(metric, model.num_layers) for name, metric in metrics.entries(min_length=1)}
        for task, metrics in root.key("tasks").entries(min_length=1)
    }
    for task, metrics in tasks.items():  # @1 scored every method's every n on every metric: the same points
        first = next(iter(metrics.values()))
        for name, metric in metrics.items():
            for method, points in metric.methods.items():
                other = first.methods.get(method)
                if other is None or (other.n, other.start) != (points.n, points.start):
                    root.key("tasks").key(task).key(name).key("methods").key(method).fail(
                        "the same methods and spans as the task's first metric"
                    )
    return PruneCurveResult.from_curves(
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
    their block. `model_id`, `num_layers` and `architecture` say which model the curve was measured on.
    """

    source: str
    method: str
    n: int
    blocks: list[int]
    sublayers: list[tuple[int, str]]
    model_id: str | None
    num_layers: int
    architecture: str | None = None


def read_curve_set(path: str | os.PathLike[str], method: str, n: int) -> CurveSet:
    """Read `method`'s set for `n` from a prune_curve.json.

    Schema @2: `methods.<name>.sets.<n>` (`blocks`, and `sublayers` as [block, "attention" | "mlp"] pairs).
    An older @1 file holds spans only: the span [start, start + n) a span method chose for n.

    Raises:
        ResultError: not a prune-curve file; no such method or n; a set not of n distinct units in range.
    """
    source = str(path)
    root = Node(read_json(path), source)
    family = schema_family(PRUNE_CURVE_SCHEMA)
    schema = root.obj().get("schema")
    model = root.key("model")
    num_layers = model.key("num_layers").integer(minimum=1)
    model_id, architecture = model.key("id").text(optional=True), model.key("architecture").text(optional=True)
    if schema == f"{family}@1":
        spans = _spans_of_v1(root)
        starts = _pick(spans, method, f"{source} has no method {method!r}", "")
        start = _pick(starts, n, f"{source} has no {method} set for n = {n}", "n = ")
        return CurveSet(source, method, n, list(range(start, start + n)), [], model_id, num_layers, architecture)
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
    if len(set(units := [*blocks, *sublayers])) != len(units) or len(units) != n:  # a hand edit: `[1, 1]`
        chosen.fail(f"{n} distinct units (the set for n = {n})", f"got {len(units)}: {', '.join(map(str, units))}")
    return CurveSet(source, method, n, sorted(blocks), sublayers, model_id, num_layers, architecture)


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
