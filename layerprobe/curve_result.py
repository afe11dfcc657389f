"""prune_curve.json (`layerprobe/prune-curve@1`): score vs fraction of blocks removed, per selection method.

Kept apart from results.py (which it plugs into through `load_result`) so the curve's schema and its
validation live in one small module. Layout is documented in docs/json-schema.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from layerprobe.errors import ResultError
from layerprobe.results import ModelInfo, RunInfo

PRUNE_CURVE_SCHEMA = "layerprobe/prune-curve@1"
PRUNE_CURVE_JSON = "prune_curve.json"
_POINT_FIELDS = ("n", "start", "score", "stderr", "delta", "delta_stderr")


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

    def to_dict(self) -> dict[str, Any]:
        return {k: list(getattr(self, k)) for k in _POINT_FIELDS}


@dataclass(frozen=True)
class CurveMetric:
    baseline: float
    baseline_stderr: float | None
    higher_is_better: bool
    methods: dict[str, CurveMethod]


@dataclass(frozen=True)
class PruneCurveResult:
    """The pruning curve of one model: per task and metric, one CurveMethod per selection method.

    Attributes:
        settings: tasks, max_fraction, baseline seeds, the angular source, corpus options…
        selection: the angular distances d(x^l, x^(l+n)) of the spans chosen by Gromov's rule, per n.
    """

    model: ModelInfo
    settings: dict[str, Any]
    selection: dict[str, list[Any]]
    tasks: dict[str, dict[str, CurveMetric]]
    run: RunInfo

    @property
    def num_layers(self) -> int:
        return self.model.num_layers

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": PRUNE_CURVE_SCHEMA,
            "model": vars(self.model),
            "settings": dict(self.settings),
            "selection": dict(self.selection),
            "tasks": {
                task: {
                    name: {
                        "baseline": m.baseline,
                        "baseline_stderr": m.baseline_stderr,
                        "higher_is_better": m.higher_is_better,
                        "methods": {k: v.to_dict() for k, v in m.methods.items()},
                    }
                    for name, m in metrics.items()
                }
                for task, metrics in self.tasks.items()
            },
            "run": vars(self.run),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PruneCurveResult:
        if data.get("schema") != PRUNE_CURVE_SCHEMA:
            raise ResultError(f"Expected a {PRUNE_CURVE_SCHEMA} result, got schema {data.get('schema')!r}.")
        try:
            model = ModelInfo.from_dict(data["model"])
            tasks = {}
            for task, metrics in data["tasks"].items():
                tasks[task] = {}
                for name, m in metrics.items():
                    methods = {k: _method(v, model.num_layers) for k, v in m["methods"].items()}
                    tasks[task][name] = CurveMetric(
                        float(m["baseline"]), m.get("baseline_stderr"), bool(m["higher_is_better"]), methods
                    )
            return cls(model, dict(data["settings"]), dict(data["selection"]), tasks, RunInfo.from_dict(data["run"]))
        except ResultError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ResultError(f"Malformed {PRUNE_CURVE_SCHEMA} result: {exc!r}") from exc


def _method(data: dict[str, Any], num_layers: int) -> CurveMethod:
    method = CurveMethod(**{k: list(data[k]) for k in _POINT_FIELDS})
    if len({len(getattr(method, k)) for k in _POINT_FIELDS}) != 1:
        raise ResultError(f"Malformed {PRUNE_CURVE_SCHEMA} result: a method's point lists differ in length.")
    for n, start in zip(method.n, method.start, strict=True):
        if not (1 <= n <= num_layers and 0 <= start <= num_layers - n):
            raise ResultError(f"Malformed {PRUNE_CURVE_SCHEMA} result: span [{start}, {start + n}) is not in 0..L.")
    return method
