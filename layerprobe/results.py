"""Result objects and the only code that reads or writes result JSON.

JSON is the source of truth: plots, `compare` and humans all read the same file, so every number a
later step needs (including the `summary` block) is written here at creation time. Files are written
atomically (temp file + rename) so a crash never leaves half a result behind.
"""

from __future__ import annotations

import json
import math
import os
import secrets
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from layerprobe.errors import ResultError
from layerprobe.placement import Placement

if TYPE_CHECKING:
    from layerprobe.evaluate.scores import Evaluation

ANGULAR_SCHEMA = "layerprobe/angular@1"
PRUNE_DROP_SCHEMA = "layerprobe/prune-drop@1"
DEPTH_SCHEMA = "layerprobe/depth@1"
SUBLAYER_KINDS = ("attention", "mlp")
LAZY_THRESHOLD = 0.2
SIGNIFICANCE_Z = 1.96  # "not significantly above the row minimum": within 1.96 standard errors
# The file names of a run directory; every command and the gate read them from here.
ANGULAR_JSON = "angular.json"
PRUNE_DROP_JSON = "prune_drop.json"
PRUNE_DROP_PARTIAL_JSON = "prune_drop.partial.json"
PRUNE_DROP_PARTIAL_SAMPLES = "prune_drop.partial.samples"  # per-document rows while a run is in progress
SAMPLES_DIR = "samples"  # --log-samples: <out>/samples/<task>.jsonl
DEPTH_JSON = "depth.json"


@dataclass(frozen=True)
class ModelInfo:
    """Which checkpoint was measured, exactly: enough to reproduce the run and to refuse mixing runs."""

    id: str
    revision: str | None
    commit: str | None
    architecture: str
    model_type: str
    kind: str
    dtype: str
    num_layers: int
    layer_path: str
    block_class: str

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelInfo:
        return cls(**{k: data.get(k) for k in cls.__dataclass_fields__})


@dataclass(frozen=True)
class RunInfo:
    """When and with what the result was produced."""

    started_at: str
    seconds: float
    versions: dict[str, str]
    device: str
    prefix_reuse: str | None = None  # prune-drop's shared engine: "on", "off" or "unavailable: <why>"

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunInfo:
        return cls(**{k: data.get(k) for k in cls.__dataclass_fields__})


@dataclass(frozen=True)
class AngularResult:
    """The full angular-distance matrix between the inputs of every pair of blocks.

    `distance[i][j]` is the mean over measured positions of d(x^i, x^j), 0 <= i, j <= L, where x^i is
    the input of block i and x^L the output of the last block before any final norm.
    `distance_stderr[i][j]` is its standard error from the spread between windows, and
    `nonfinite_positions[i][j]` the positions left out of that entry because x^i or x^j held NaN/inf.
    `row_difference_stderr[l][l+n]` is the stderr of d(x^l, x^(l+n)) minus the minimum of span row n,
    paired over windows. All three are None for files written before they existed.
    """

    model: ModelInfo
    data: dict[str, Any]
    distance: list[list[float]]
    nonfinite_tokens: int
    run: RunInfo
    tokens_per_second: float
    summary: dict[str, Any] = field(default_factory=dict)
    distance_stderr: list[list[float]] | None = None
    nonfinite_positions: list[list[int]] | None = None
    row_difference_stderr: list[list[float]] | None = None

    def summarize(self, threshold: float = LAZY_THRESHOLD) -> dict[str, Any]:
        """`angular_summary` of this result, with whichever standard errors it carries."""
        return angular_summary(
            self.distance, threshold, stderr=self.distance_stderr, difference_stderr=self.row_difference_stderr
        )

    @property
    def num_layers(self) -> int:
        return len(self.distance) - 1

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": ANGULAR_SCHEMA,
            "model": asdict(self.model),
            "data": dict(self.data),
            "distance": self.distance,
            "distance_stderr": self.distance_stderr,
            "row_difference_stderr": self.row_difference_stderr,
            "nonfinite_tokens": self.nonfinite_tokens,
            "nonfinite_positions": self.nonfinite_positions,
            "tokens_per_second": self.tokens_per_second,
            "summary": self.summary or self.summarize(),
            "run": asdict(self.run),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AngularResult:
        _check_schema(data, ANGULAR_SCHEMA)
        try:
            size = len(data["distance"])
            stderr = _optional_matrix(data.get("distance_stderr"), float, size)  # absent before stderrs existed
            difference = _optional_matrix(data.get("row_difference_stderr"), float, size)
            return cls(
                model=ModelInfo.from_dict(data["model"]),
                data=data["data"],
                distance=[[float(v) for v in row] for row in data["distance"]],
                nonfinite_tokens=int(data.get("nonfinite_tokens", 0)),
                run=RunInfo.from_dict(data["run"]),
                tokens_per_second=float(data.get("tokens_per_second", 0.0)),
                summary=data.get("summary")
                or angular_summary(data["distance"], stderr=stderr, difference_stderr=difference),
                distance_stderr=stderr,
                nonfinite_positions=_optional_matrix(data.get("nonfinite_positions"), int, size),
                row_difference_stderr=difference,
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ResultError(f"Malformed {ANGULAR_SCHEMA} result: {exc!r}") from exc


@dataclass(frozen=True)
class MetricDrop:
    """One metric of one task: the baseline and the score with each evaluated layer removed.

    `stderr` is each pruned score's own standard error (as lm-eval reports it). `delta_stderr`,
    `delta_ci95` and `significant` describe the *paired* difference pruned − baseline, computed from the
    per-document values of both variants (`delta_method`: "paired_mean" closed form or
    "paired_bootstrap", with `bootstrap` = {"draws", "seed"}). Files written before they existed read
    back with them None; consumers then fall back to the unpaired stderrs.
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

    @property
    def delta(self) -> list[float]:
        return [p - self.baseline for p in self.pruned]

    @property
    def paired(self) -> bool:
        """Whether this metric carries paired stderrs (files before issue #10 do not)."""
        return self.delta_stderr is not None

    def to_dict(self) -> dict[str, Any]:
        out = {
            "baseline": self.baseline,
            "baseline_stderr": self.baseline_stderr,
            "higher_is_better": self.higher_is_better,
            "layers": list(self.layers),
            "pruned": list(self.pruned),
            "delta": self.delta,
            "delta_stderr": self.delta_stderr,
            "delta_ci95": self.delta_ci95,
            "significant": self.significant,
            "delta_method": self.delta_method,
            "bootstrap": self.bootstrap,
            "stderr": list(self.stderr),
        }
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MetricDrop:
        layers = [int(v) for v in data["layers"]]
        delta_stderr = data.get("delta_stderr")
        ci = data.get("delta_ci95")
        significant = data.get("significant")
        for name, values in (("delta_stderr", delta_stderr), ("delta_ci95", ci), ("significant", significant)):
            if values is not None and len(values) != len(layers):
                raise ValueError(f"{name} has {len(values)} entries for {len(layers)} layers")
        return cls(
            baseline=data["baseline"],
            baseline_stderr=data.get("baseline_stderr"),
            higher_is_better=bool(data.get("higher_is_better", True)),
            layers=layers,
            pruned=list(data["pruned"]),
            stderr=list(data.get("stderr") or [None] * len(layers)),
            delta_stderr=None if delta_stderr is None else [None if v is None else float(v) for v in delta_stderr],
            delta_ci95=None if ci is None else [None if v is None else [float(v[0]), float(v[1])] for v in ci],
            significant=None if significant is None else [None if v is None else bool(v) for v in significant],
            delta_method=data.get("delta_method"),
            bootstrap=data.get("bootstrap"),
        )


@dataclass(frozen=True)
class TaskDrop:
    """All metrics lm-eval (or the SQuAD scorer) reported for one task, in the order it reported them."""

    metrics: dict[str, MetricDrop]
    num_fewshot: int | None
    limit: float | None
    samples: int | None
    nonfinite: int = 0  # evaluations' inputs with NaN/inf model outputs (SQuAD windows): counted, never hidden
    agreement: dict[str, dict[str, Any]] | None = None  # metric → agreement with an angular result (#10)

    @property
    def primary_metric(self) -> str:
        return next(iter(self.metrics))

    def to_dict(self) -> dict[str, Any]:
        out = {
            "num_fewshot": self.num_fewshot,
            "limit": self.limit,
            "samples": self.samples,
            "nonfinite": self.nonfinite,
            "metrics": {name: m.to_dict() for name, m in self.metrics.items()},
        }
        if self.agreement is not None:
            out["agreement"] = self.agreement
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TaskDrop:
        return cls(
            metrics={k: MetricDrop.from_dict(v) for k, v in data["metrics"].items()},
            num_fewshot=data.get("num_fewshot"),
            limit=data.get("limit"),
            samples=data.get("samples"),
            nonfinite=int(data.get("nonfinite", 0)),
            agreement=data.get("agreement"),
        )


@dataclass(frozen=True)
class PruneDropResult:
    """ΔP(l) = P_pruned(l) − P_original for every evaluated layer of every task."""

    model: ModelInfo
    engine: str
    settings: dict[str, Any]
    tasks: dict[str, TaskDrop]
    run: RunInfo
    summary: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
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
    def from_dict(cls, data: dict[str, Any]) -> PruneDropResult:
        _check_schema(data, PRUNE_DROP_SCHEMA)
        try:
            tasks = {k: TaskDrop.from_dict(v) for k, v in data["tasks"].items()}
            return cls(
                model=ModelInfo.from_dict(data["model"]),
                engine=data.get("engine", "simple"),
                settings=data.get("settings", {}),
                tasks=tasks,
                run=RunInfo.from_dict(data["run"]),
                summary=data.get("summary") or prune_drop_summary(tasks),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ResultError(f"Malformed {PRUNE_DROP_SCHEMA} result: {exc!r}") from exc


def angular_summary(
    distance: list[list[float]],
    threshold: float = LAZY_THRESHOLD,
    stderr: list[list[float]] | None = None,
    z: float = SIGNIFICANCE_Z,
    difference_stderr: list[list[float]] | None = None,
) -> dict[str, Any]:
    """The numbers `compare` gates on, computed once so that humans and CI read the same values.

    A block l is "lazy" when d(x^l, x^(l+1)) < threshold: it barely turns its input. Unmeasured (NaN)
    entries are skipped by every statistic here and listed in `unmeasured`, so a broken block can
    neither be "most similar" nor pull a mean to NaN. With `stderr`, each span's choice of blocks to
    drop says how sure it is: `candidates` are the starts whose distance is not significantly above the
    row minimum, and `clear` is true when only the minimum is. The test is paired when
    `difference_stderr` (the stderr of each cell minus its row minimum, over the same windows) is given:
    d_l − d_min ≤ z · se(d_l − d_min); otherwise unpaired and conservative: d_l − d_min ≤ z · sqrt(se_l² + se_min²).
    """
    num_layers = len(distance) - 1
    adjacent = [distance[l][l + 1] for l in range(num_layers)]
    finite_adjacent = [d for d in adjacent if math.isfinite(d)]
    most_redundant = {}
    for span in range(1, num_layers + 1):
        choice = _span_choice(distance, stderr, span, z, difference_stderr)
        if choice is not None:
            most_redundant[str(span)] = choice
    lazy = [l for l, d in enumerate(adjacent) if d < threshold]
    return {
        "lazy_threshold": threshold,
        "adjacent": adjacent,
        "adjacent_stderr": None if stderr is None else [stderr[l][l + 1] for l in range(num_layers)],
        "lazy_layers": lazy,
        "lazy_count": len(lazy),
        "mean_adjacent": sum(finite_adjacent) / len(finite_adjacent) if finite_adjacent else None,
        "unmeasured": [
            [i, j]
            for i in range(num_layers + 1)
            for j in range(i + 1, num_layers + 1)
            if not math.isfinite(distance[i][j])
        ],
        "significance_z": None if stderr is None else z,
        "candidates_test": None if stderr is None else "unpaired" if difference_stderr is None else "paired",
        "most_redundant": most_redundant,
    }


def _span_choice(
    distance: list[list[float]],
    stderr: list[list[float]] | None,
    span: int,
    z: float,
    difference_stderr: list[list[float]] | None = None,
) -> dict[str, Any] | None:
    """Gromov et al.'s start l* = argmin_l d(x^l, x^(l+span)) (ties: lowest l), and the starts as good within noise.

    Paired, the difference to the minimum is judged with its own stderr over the same windows. Without it
    (older files) the unpaired combined stderr is used: both entries come from the same windows, so their
    errors are positively correlated and the true stderr of the difference is smaller; the candidate list
    is then on the generous side (a "clear" choice is really clear).
    """
    num_layers = len(distance) - 1
    row = [(distance[l][l + span], l) for l in range(num_layers - span + 1) if math.isfinite(distance[l][l + span])]
    if not row:
        return None
    value, start = min(row)
    if stderr is None:
        return {"layer": start, "distance": value, "stderr": None, "clear": None, "candidates": None}
    best_se = stderr[start][start + span]

    def noise(l: int) -> float:
        if difference_stderr is not None:
            return difference_stderr[l][l + span]
        return math.hypot(stderr[l][l + span], best_se)

    # A NaN stderr cannot rule a start out.
    candidates = [l for d, l in sorted(row, key=lambda item: item[1]) if not d - value > z * noise(l)]
    return {
        "layer": start,
        "distance": value,
        "stderr": best_se,
        "clear": candidates == [start],
        "candidates": candidates,
    }


def _optional_matrix(value: Any, kind: type, size: int) -> list[list[Any]] | None:
    """A size×size matrix field that older files lack (None stays None; anything else must be rows of numbers)."""
    if value is None:
        return None
    if len(value) != size or any(len(row) != size for row in value):
        raise ValueError(f"a matrix field is not {size}×{size} like the distance matrix")
    return [[kind(v) for v in row] for row in value]


def prune_drop_summary(tasks: dict[str, TaskDrop]) -> dict[str, Any]:
    """Per task, the primary metric's baseline and the layers whose removal is within noise."""
    out: dict[str, Any] = {}
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
            # Blocks whose paired 95 % interval of ΔP excludes 0; None for files without paired stderrs.
            "significant_layers": None
            if metric.significant is None
            else [l for l, sig in zip(metric.layers, metric.significant, strict=True) if sig],
        }
        if task.agreement and metric_name in task.agreement:
            out[name]["agreement"] = task.agreement[metric_name]
    return out


def atomic_write(path: str | os.PathLike[str], write: Callable[[Path], object]) -> Path:
    """Have `write(tmp)` fill a temporary file beside `path`, then rename it over `path`.

    A reader sees the old file or the new one, never half of one; on any failure the temporary file is
    removed. The temporary file is created by `write` itself (not `mkstemp`, which would make it private
    to its owner), so results and plots get the permissions of any file the user writes and CI artifact
    uploaders or web servers running as another user can read them. Every result file and plot
    layerprobe writes goes through here.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def write_json(path: str | os.PathLike[str], data: dict[str, Any]) -> Path:
    """Write JSON atomically (see `atomic_write`)."""
    text = json.dumps(data, indent=2, allow_nan=True) + "\n"
    return atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def evaluation_to_dict(evaluation: Evaluation) -> dict[str, Any]:
    """The JSON form of one evaluation, as kept in the prune-drop progress file (with its engine)."""
    return {
        "metrics": {
            name: {"value": m.value, "stderr": m.stderr, "higher_is_better": m.higher_is_better}
            for name, m in evaluation.metrics.items()
        },
        "num_fewshot": evaluation.num_fewshot,
        "samples": evaluation.samples,
        "engine": evaluation.engine,
        "nonfinite": evaluation.nonfinite,
        **({"prefix_reuse": evaluation.prefix_reuse} if evaluation.prefix_reuse is not None else {}),
        # How the per-document values (kept in the run's sample log, not here) make up each score.
        "per_sample": {name: found.spec() for name, found in evaluation.per_sample.items()},
    }


def evaluation_from_dict(data: dict[str, Any]) -> Evaluation:
    """Read back `evaluation_to_dict`'s form (older progress files may lack engine, nonfinite, per_sample).

    `per_sample` comes back with each metric's aggregation rule and no values (those are in the sample log).
    """
    from layerprobe.evaluate.samples import MetricSamples
    from layerprobe.evaluate.scores import Evaluation, MetricScore

    samples = data.get("samples")
    metrics = {
        name: MetricScore(m["value"], m["stderr"], m["higher_is_better"], samples or 0)
        for name, m in data["metrics"].items()
    }
    per_sample = {
        name: MetricSamples(spec["aggregation"], {}, spec.get("weight_by_size"))
        for name, spec in (data.get("per_sample") or {}).items()
    }
    return Evaluation(
        metrics,
        data.get("num_fewshot"),
        samples,
        data.get("engine", "simple"),
        data.get("nonfinite", 0),
        per_sample,
        prefix_reuse=data.get("prefix_reuse"),
    )


def read_json(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a layerprobe JSON file, turning every way it can be unreadable into a `ResultError`."""
    path = Path(path)
    if not path.is_file():
        raise ResultError(
            f"No result file at {path}",
            hint="Pass the path of an angular.json or prune_drop.json that layerprobe wrote.",
        )
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ResultError(f"{path} is not readable JSON: {exc}") from exc
    if not isinstance(data, dict) or not str(data.get("schema", "")).startswith("layerprobe/"):
        raise ResultError(f"{path} is not a layerprobe result (no 'schema': 'layerprobe/...').")
    return data


def load_result(path: str | os.PathLike[str]) -> AngularResult | PruneDropResult | DepthResult:
    """Read any layerprobe result file into its result object."""
    data = read_json(path)
    kind = str(data["schema"]).split("@")[0]
    if kind == ANGULAR_SCHEMA.split("@")[0]:
        return AngularResult.from_dict(data)
    if kind == PRUNE_DROP_SCHEMA.split("@")[0]:
        return PruneDropResult.from_dict(data)
    if kind == DEPTH_SCHEMA.split("@")[0]:
        return DepthResult.from_dict(data)
    raise ResultError(f"{path}: unknown result schema {data['schema']!r}.")


def _check_schema(data: dict[str, Any], expected: str) -> None:
    schema = data.get("schema")
    if schema != expected:
        raise ResultError(f"Expected a {expected} result, got schema {schema!r}.")


# --- layerprobe depth ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Spread:
    """Per-index statistics over measured positions: mean, population std, min, max, count."""

    mean: list[float]
    std: list[float]
    min: list[float]
    max: list[float]
    count: list[int]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Spread:
        return cls(
            mean=[float(v) for v in data["mean"]],
            std=[float(v) for v in data["std"]],
            min=[float(v) for v in data["min"]],
            max=[float(v) for v in data["max"]],
            count=[int(v) for v in data["count"]],
        )


@dataclass(frozen=True)
class GradNorms:
    """‖∇θ mean loss‖ per block and per sublayer (parameters as in `sublayers.Sublayer.parameters`)."""

    loss: str  # "next-token" | "masked-lm"
    mean_loss: float
    positions: int
    block: list[float]
    sublayers: dict[str, list[float | None]] | None
    settings: dict[str, Any] = field(default_factory=dict)
    peak_memory_bytes: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GradNorms:
        return cls(**{k: data.get(k) for k in cls.__dataclass_fields__})


@dataclass(frozen=True)
class DepthResult:
    """Residual stream and update statistics across depth, plus norm placement (and gradient norms).

    Indices: `rms` and `variance` have L+1 entries (x^0 … x^L, x^L before any final norm); `update`
    and each sublayer have L entries (block l).
    """

    model: ModelInfo
    data: dict[str, Any]
    placement: Placement
    rms: Spread
    variance: Spread
    update: Spread
    sublayers: dict[str, dict[str, Any]] | None  # kind → {"modules": [L paths], "relative": Spread}
    grad: GradNorms | None
    nonfinite_tokens: int
    run: RunInfo
    summary: dict[str, Any] = field(default_factory=dict)

    @property
    def num_layers(self) -> int:
        return len(self.update.mean)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": DEPTH_SCHEMA,
            "model": asdict(self.model),
            "data": dict(self.data),
            "placement": self.placement.to_dict(),
            "residual": {"rms": self.rms.to_dict(), "variance": self.variance.to_dict()},
            "update": {"relative": self.update.to_dict()},
            "sublayers": None
            if self.sublayers is None
            else {
                kind: {"modules": entry["modules"], "relative": entry["relative"].to_dict()}
                for kind, entry in self.sublayers.items()
            },
            "grad": None if self.grad is None else self.grad.to_dict(),
            "nonfinite_tokens": self.nonfinite_tokens,
            "summary": self.summary or depth_summary(self),
            "run": asdict(self.run),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DepthResult:
        schema = data.get("schema")
        if schema != DEPTH_SCHEMA:
            raise ResultError(f"Expected a {DEPTH_SCHEMA} result, got schema {schema!r}.")
        try:
            subs = data.get("sublayers")
            result = cls(
                model=ModelInfo.from_dict(data["model"]),
                data=data["data"],
                placement=Placement.from_dict(data["placement"]),
                rms=Spread.from_dict(data["residual"]["rms"]),
                variance=Spread.from_dict(data["residual"]["variance"]),
                update=Spread.from_dict(data["update"]["relative"]),
                sublayers=None
                if subs is None
                else {
                    k: {"modules": list(v["modules"]), "relative": Spread.from_dict(v["relative"])}
                    for k, v in subs.items()
                },
                grad=None if data.get("grad") is None else GradNorms.from_dict(data["grad"]),
                nonfinite_tokens=int(data.get("nonfinite_tokens", 0)),
                run=RunInfo.from_dict(data["run"]),
                summary=data.get("summary") or {},
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ResultError(f"Malformed {DEPTH_SCHEMA} result: {exc!r}") from exc
        if len(result.rms.mean) != result.num_layers + 1:
            raise ResultError(
                f"Malformed {DEPTH_SCHEMA} result: residual.rms needs L+1 = {result.num_layers + 1} values."
            )
        return result


def depth_summary(result: DepthResult) -> dict[str, Any]:
    """The numbers `compare` gates on and a reader wants first.

    `rms_growth` = mean RMS of x^L / mean RMS of x^0: how much the residual stream grows across the
    stack (the Curse of Depth's symptom under Pre-LN; ≈ 1 under Post-LN, whose every block renormalises).
    """
    rms = result.rms.mean
    growth = rms[-1] / rms[0] if rms and rms[0] and math.isfinite(rms[0]) else None
    updates = [(u, l) for l, u in enumerate(result.update.mean) if math.isfinite(u)]
    out: dict[str, Any] = {
        "rms_growth": growth,
        "placement": result.placement.summary,
        "placement_pattern": result.placement.pattern,
        "mean_relative_update": sum(u for u, _ in updates) / len(updates) if updates else None,
        "smallest_update": None if not updates else {"layer": min(updates)[1], "relative": min(updates)[0]},
    }
    if result.grad is not None:
        finite = [g for g in result.grad.block if g is not None and math.isfinite(g)]
        out["grad_ratio_last_first"] = (
            result.grad.block[-1] / result.grad.block[0] if finite and result.grad.block[0] else None
        )
    return out
