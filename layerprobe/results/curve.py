"""prune_curve.json (`layerprobe/prune-curve@1`): score vs number of consecutive blocks removed, per method.

Per task and metric, one `CurveMethod` per way of choosing the removed span (Gromov et al.'s angular
rule, the last blocks, random spans): for n blocks removed, the span [start, start+n) and its score.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from layerprobe.results.io import PRUNE_CURVE_SCHEMA, check_schema
from layerprobe.results.json_types import JSONObject, JSONValue, Record
from layerprobe.results.provenance import ModelInfo, RunInfo
from layerprobe.results.validate import Node

POINT_FIELDS = ("n", "start", "score", "stderr", "delta", "delta_stderr")


@dataclass(frozen=True)
class CurveMethod:
    """One selection method's points: for n blocks removed, the span [start, start+n) and its score.

    `delta_stderr` is the paired stderr of score − baseline, None where not pairable.
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
