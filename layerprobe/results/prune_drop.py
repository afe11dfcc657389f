"""prune_drop.json (`layerprobe/prune-drop@2`): ΔP(l) = P_pruned(l) − P_original, per task and metric.

One `MetricDrop` per metric holds the baseline and every pruned variant's score, with the paired
uncertainty of their difference; a `TaskDrop` holds a task's metrics in the order the evaluator reported
them (the first is the task's primary metric). The `summary` block is computed here and recomputed when
a file is read back. @2 added the sequential fields (`items`, `stop`, `delta_cs95`); @1 files still read.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import TypedDict, TypeVar

import layerprobe.results.validate as v
from layerprobe.core import PruneSpec, recorded_options
from layerprobe.results.evaluation import STOP_REASONS
from layerprobe.results.io import PRUNE_DROP_SCHEMA, PRUNE_DROP_SCHEMA_V1, check_schema
from layerprobe.results.json_types import JSONObject, Record
from layerprobe.results.provenance import ModelInfo, RunInfo
from layerprobe.results.prune_drop_face import PruneDropFace
from layerprobe.results.validate import Node

T = TypeVar("T")
TASK_FIELDS: dict[str, v.Kind] = {
    "num_fewshot": v.integer(optional=True, minimum=0),
    "limit": lambda node: node.number(optional=True, finite=True, low=0.0),
    "samples": v.integer(optional=True, minimum=0),
    "nonfinite": v.integer(default=0, minimum=0),
    "version": v.text(optional=True),
}
# The recorded settings are declared on PruneSpec (core/option_spec.py): how each is read follows from there.
SETTINGS_FIELDS: dict[str, v.Kind] = {key: v.declared_kind(item) for key, item in recorded_options(PruneSpec).items()}


class _TaskSummaryFields(TypedDict):
    metric: str
    baseline: float
    baseline_stderr: float | None
    layers_within_stderr: list[int]
    most_harmful: dict[str, float] | None
    significant_layers: list[int] | None


class TaskSummary(_TaskSummaryFields, total=False):
    """One task's line of the summary: the primary metric, the blocks within noise, the most harmful one."""

    agreement: JSONObject  # with an angular result, when the run had one (prune/agreement.py)


@dataclass(frozen=True)
class MetricDrop:
    """One metric of one task: the baseline and the score with each evaluated layer removed.

    `stderr` is each pruned score's own standard error (as lm-eval reports it). `delta_stderr`,
    `delta_ci95` and `significant` describe the *paired* difference pruned − baseline, computed from the
    per-document values of both variants (`delta_method`: "paired_mean" closed form or
    "paired_bootstrap", with `bootstrap` = {"draws", "seed"}). Files written before they existed read
    back with them None; consumers then fall back to the unpaired stderrs.

    A sequential run (`--precision`) scores each variant on the first `items` documents of a seeded order
    and records why it stopped (`stop`) and the anytime-valid 95 % interval it stopped with
    (`delta_cs95`); `pruned` is then the baseline plus the paired mean difference on those documents, so
    `delta` is that difference. `interval95` is the interval consumers show: `delta_cs95` where present.
    `p_value` is each difference's two-sided p-value and `p_adjusted` the same adjusted over every
    variant × task × metric of the run (the method is the run's `settings.multiplicity`); `significant`
    is then `p_adjusted < 0.05`. Files written before p-values read back with both None and their
    `significant` as stored (the unadjusted 95 % interval excluding 0).
    """

    baseline: float
    baseline_stderr: float | None
    higher_is_better: bool
    layers: list[int]
    pruned: list[float]
    stderr: list[float | None]
    delta_stderr: list[float | None] | None = None
    delta_ci95: list[list[float] | None] | None = None
    significant: list[bool | None] | None = None
    delta_method: str | None = None
    bootstrap: dict[str, int] | None = None
    items: list[int | None] | None = None
    stop: list[str | None] | None = None
    delta_cs95: list[list[float] | None] | None = None
    p_value: list[float | None] | None = None
    p_adjusted: list[float | None] | None = None

    @property
    def delta(self) -> list[float]:
        return [p - self.baseline for p in self.pruned]

    @property
    def sequential(self) -> bool:
        """Whether this metric comes from a sequential run (`--precision`): anytime intervals per variant."""
        return self.delta_cs95 is not None

    @property
    def interval95(self) -> list[list[float] | None] | None:
        """The 95 % interval of each ΔP to show and gate on: the anytime one where present, else the paired one."""
        return self.delta_cs95 if self.delta_cs95 is not None else self.delta_ci95

    @property
    def paired(self) -> bool:
        """Whether this metric carries paired stderrs (older files do not)."""
        return self.delta_stderr is not None

    def to_dict(self) -> dict[str, object]:
        return {
            "baseline": self.baseline,
            "baseline_stderr": self.baseline_stderr,
            "higher_is_better": self.higher_is_better,
            "layers": list(self.layers),
            "pruned": list(self.pruned),
            "delta": self.delta,
            "delta_stderr": self.delta_stderr,
            "delta_ci95": self.delta_ci95,
            "significant": self.significant,
            "p_value": self.p_value,
            "p_adjusted": self.p_adjusted,
            "delta_method": self.delta_method,
            "bootstrap": self.bootstrap,
            "stderr": list(self.stderr),
            "items": self.items,
            "stop": self.stop,
            "delta_cs95": self.delta_cs95,
        }

    @classmethod
    def from_dict(cls, data: JSONObject | Node, source: str = "metric", name: str | None = None) -> MetricDrop:
        """Validate one metric: `layers`, `pruned` and `stderr` must be parallel arrays of the right types.

        The scores of a share of answers (`name` acc, exact_match…) must lie in [0, 1].
        """
        node = Node.of(data, source)
        low, high = v.score_range(name)
        layers = [item.integer(minimum=0) for item in node.key("layers").items()]
        if len(set(layers)) != len(layers):
            node.key("layers").fail("an array of distinct block indices", f"got {layers}")
        pruned_node, stderr_node = node.key("pruned"), node.key("stderr")
        pruned = [item.number(low=low, high=high) for item in pruned_node.items()]
        stderr: list[float | None] = (
            [item.number(optional=True, low=0.0) for item in stderr_node.items()]
            if stderr_node.given
            else [None] * len(layers)
        )
        for name, count in (("pruned", len(pruned)), ("stderr", len(stderr))):
            if count != len(layers):
                node.key(name).fail(f"an array of {len(layers)} items (one per entry of layers)", f"got {count} items")
        baseline = node.key("baseline").number(low=low, high=high)
        items = _per_layer(node.key("items"), layers, lambda n: n.integer(optional=True, minimum=1))
        # ΔP = pruned − baseline on the same documents: its paired interval holds it (a sequential run's
        # pruned score may rest on fewer documents than the baseline, so its intervals are not checked so)
        deltas = [None if items and items[k] is not None else p - baseline for k, p in enumerate(pruned)]
        return cls(
            baseline=baseline,
            baseline_stderr=node.key("baseline_stderr").number(optional=True, low=0.0),
            higher_is_better=node.key("higher_is_better").flag(default=True),
            layers=layers,
            pruned=pruned,
            stderr=stderr,
            delta_stderr=_per_layer(node.key("delta_stderr"), layers, lambda n: n.number(optional=True, low=0.0)),
            delta_ci95=_per_layer(node.key("delta_ci95"), layers, _holding(deltas)),
            significant=_per_layer(node.key("significant"), layers, lambda n: n.flag(optional=True)),
            p_value=_per_layer(node.key("p_value"), layers, _probability),
            p_adjusted=_per_layer(node.key("p_adjusted"), layers, _probability),
            delta_method=node.key("delta_method").text(optional=True),
            bootstrap=_bootstrap(node.key("bootstrap")),
            items=items,
            stop=_per_layer(node.key("stop"), layers, _stop_reason),
            delta_cs95=_per_layer(node.key("delta_cs95"), layers, v.interval),
        )


@dataclass(frozen=True)
class FlipRate:
    """For one filter of a generating task: per removed unit, the share of documents whose answer changed.

    `flips[k]` of `documents` answers (after the filter) differ from the full model's with `layers[k]`
    removed; `rate[k]` = flips / documents and `ci95[k]` its Wilson 95 % interval.
    """

    layers: list[int]
    flips: list[int]
    documents: int
    rate: list[float]
    ci95: list[list[float]]

    def to_dict(self) -> dict[str, object]:
        return {
            "layers": list(self.layers),
            "flips": list(self.flips),
            "documents": self.documents,
            "rate": list(self.rate),
            "ci95": [list(c) for c in self.ci95],
        }

    @classmethod
    def from_dict(cls, data: JSONObject | Node, source: str = "flip_rate") -> FlipRate:
        node = Node.of(data, source)
        layers = [item.integer(minimum=0) for item in node.key("layers").items()]
        documents = node.key("documents").integer(minimum=1)
        flips = _per_layer(node.key("flips"), layers, lambda n: n.integer(minimum=0)) or []
        rate = _per_layer(node.key("rate"), layers, lambda n: n.number(finite=True, low=0.0, high=1.0)) or []
        ci95 = _per_layer(node.key("ci95"), layers, _holding(rate)) or []
        if any(f > documents for f in flips):
            node.key("flips").fail(f"counts of at most documents = {documents}", str(flips))
        if len(flips) != len(layers) or len(rate) != len(layers) or any(c is None for c in ci95):
            node.fail("flips, rate and ci95 with one entry per layer")
        return cls(layers, flips, documents, rate, [c for c in ci95 if c is not None])


@dataclass(frozen=True)
class TaskDrop:
    """All metrics lm-eval (or the SQuAD scorer) reported for one task, in the order it reported them."""

    metrics: dict[str, MetricDrop]
    num_fewshot: int | None
    limit: float | None
    samples: int | None
    nonfinite: int = 0  # evaluations' inputs with NaN/inf model outputs (SQuAD windows): counted, never hidden
    version: str | None = None  # lm-eval's version of the task (None for squad or older files)
    agreement: dict[str, JSONObject] | None = None  # metric → agreement with an angular result
    flip_rate: dict[str, FlipRate] | None = None  # generating tasks: filter → answers changed per variant

    @property
    def primary_metric(self) -> str:
        return next(iter(self.metrics))

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {
            "num_fewshot": self.num_fewshot,
            "limit": self.limit,
            "samples": self.samples,
            "nonfinite": self.nonfinite,
            "version": self.version,
            "metrics": {name: m.to_dict() for name, m in self.metrics.items()},
        }
        if self.agreement is not None:
            out["agreement"] = self.agreement
        if self.flip_rate is not None:
            out["flip_rate"] = {name: rate.to_dict() for name, rate in self.flip_rate.items()}
        return out

    @classmethod
    def from_dict(cls, data: JSONObject | Node, source: str = "task") -> TaskDrop:
        node = Node.of(data, source)
        fields = v.read_fields(node, TASK_FIELDS)
        metrics = {
            name: MetricDrop.from_dict(metric, name=name) for name, metric in node.key("metrics").entries(min_length=1)
        }
        agreement = node.key("agreement")  # metric → its agreement record, read by prune/agreement.py's code
        by_metric = {name: record.obj() for name, record in agreement.entries()} if agreement.given else None
        flips = node.key("flip_rate")
        flip_rate = {name: FlipRate.from_dict(item) for name, item in flips.entries()} if flips.given else None
        return cls(metrics=metrics, agreement=by_metric, flip_rate=flip_rate, **fields)


@dataclass(frozen=True, repr=False)
class PruneDropResult(PruneDropFace):
    """ΔP(l) = P_pruned(l) − P_original for every evaluated layer of every task.

    `summary` is None until the result is read back (`to_dict` computes it).
    """

    model: ModelInfo
    engine: str
    settings: Record
    tasks: dict[str, TaskDrop]
    run: RunInfo
    summary: dict[str, TaskSummary] | None = None

    @property
    def family(self) -> int | None:
        """m, how many p-values the `significant` flags were adjusted over (None for files without p-values)."""
        pvalues = [p for t in self.tasks.values() for m in t.metrics.values() for p in m.p_value or []]
        has_pvalues = any(m.p_value is not None for t in self.tasks.values() for m in t.metrics.values())
        return sum(p is not None for p in pvalues) if has_pvalues else None

    def to_dict(self) -> dict[str, object]:
        tasks = {name: t.to_dict() for name, t in self.tasks.items()}
        return {
            "schema": PRUNE_DROP_SCHEMA,
            "model": asdict(self.model),
            "engine": self.engine,
            "settings": dict(self.settings),
            "tasks": tasks,
            "summary": self.summary or prune_drop_summary(self.tasks),
            "run": asdict(self.run),
        }

    @classmethod
    def from_dict(cls, data: JSONObject, source: str = "prune-drop result") -> PruneDropResult:
        """Validate every field (see `TASK_FIELDS`, `MODEL_FIELDS`) and build the result.

        Removed blocks must lie in 0 … L−1; the stored `summary` is recomputed from the tasks.

        Raises:
            ResultError: naming `source` and the JSON path of the first bad field.
        """
        root = Node(data, source)
        check_schema(root, PRUNE_DROP_SCHEMA, older=(PRUNE_DROP_SCHEMA_V1,))
        model = ModelInfo.from_dict(root.key("model"))
        tasks = {name: TaskDrop.from_dict(task) for name, task in root.key("tasks").entries(min_length=1)}
        for name, task in tasks.items():
            for metric_name, metric in task.metrics.items():
                outside = [layer for layer in metric.layers if layer >= model.num_layers]
                if outside:
                    root.key("tasks").key(name).key("metrics").key(metric_name).key("layers").fail(
                        f"block indices below L = {model.num_layers} (model.num_layers)", f"got {outside}"
                    )
        settings = root.key("settings")
        return cls(
            model=model,
            engine=root.key("engine").text(default="simple"),
            settings=v.checked_record(settings, SETTINGS_FIELDS) if settings.present else {},
            tasks=tasks,
            run=RunInfo.from_dict(root.key("run")),
            summary=prune_drop_summary(tasks),
        )


def prune_drop_summary(tasks: dict[str, TaskDrop]) -> dict[str, TaskSummary]:
    """Per task, the primary metric's baseline and the layers whose removal is within noise."""
    out: dict[str, TaskSummary] = {}
    for name, task in tasks.items():
        metric_name = task.primary_metric
        metric = task.metrics[metric_name]
        noise = metric.baseline_stderr
        within = [l for l, d in zip(metric.layers, metric.delta, strict=True) if noise is not None and abs(d) < noise]
        worst = None
        if metric.layers:
            sign = 1.0 if metric.higher_is_better else -1.0
            worst_index = min(range(len(metric.layers)), key=lambda i: sign * metric.delta[i])
            worst = {"layer": metric.layers[worst_index], "delta": metric.delta[worst_index]}
        out[name] = {
            "metric": metric_name,
            "baseline": metric.baseline,
            "baseline_stderr": noise,
            "layers_within_stderr": within,
            "most_harmful": worst,
            # Blocks flagged significant: adjusted p < 0.05 over the run's family (the paired 95 % interval
            # excluding 0 in files without p-values); None for files without paired stderrs.
            "significant_layers": None
            if metric.significant is None
            else [l for l, sig in zip(metric.layers, metric.significant, strict=True) if sig],
        }
        if task.agreement and metric_name in task.agreement:
            out[name]["agreement"] = task.agreement[metric_name]
    return out


def variant_label(settings: Record) -> str:
    """How a result's variant index reads, from its settings (e.g. "removed block", "mlp removed (block)")."""
    unit, span = settings.get("unit", "block"), settings.get("span", 1)
    if unit != "block":
        return f"{unit} removed (block)"
    if span == 1 or not isinstance(span, int):
        return "removed block"
    return f"removed blocks l…l+{span - 1} (start l)"


def _per_layer(node: Node, layers: list[int], read: Callable[[Node], T]) -> list[T] | None:
    """An optional array with one entry per removed layer (absent or null in older files: None)."""
    if not node.given:
        return None
    values = [read(item) for item in node.items()]
    if len(values) != len(layers):
        node.fail(f"an array of {len(layers)} items (one per entry of layers)", f"got {len(values)} items")
    return values


def _holding(estimates: Sequence[float | None]) -> Callable[[Node], list[float] | None]:
    """A reader of the k-th interval of a per-layer array that must hold `estimates[k]` (None: unchecked)."""
    index = iter(range(len(estimates)))

    def read(node: Node) -> list[float] | None:
        k = next(index, None)
        return v.interval(node, estimate=None if k is None else estimates[k])

    return read


def _stop_reason(node: Node) -> str | None:
    """Why a sequential run stopped scoring a variant (`STOP_REASONS`), or null."""
    reason = node.text(optional=True)
    if reason is not None and reason not in STOP_REASONS:
        node.fail(f"null or one of {', '.join(STOP_REASONS)}", repr(reason))
    return reason


def _probability(node: Node) -> float | None:
    """A p-value: a finite number in [0, 1], or null where no test could be made."""
    return node.number(optional=True, finite=True, low=0.0, high=1.0)


def _bootstrap(node: Node) -> dict[str, int] | None:
    if not node.given:
        return None
    return {name: item.integer() for name, item in node.entries()}
