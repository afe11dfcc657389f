"""Result objects and the only code that reads or writes result JSON.

JSON is the source of truth: plots, `compare` and humans all read the same file, so every number a
later step needs (including the `summary` block) is written here at creation time. Files are written
atomically (temp file + rename) so a crash never leaves half a result behind.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from layerprobe.errors import ResultError

ANGULAR_SCHEMA = "layerprobe/angular@1"
PRUNE_DROP_SCHEMA = "layerprobe/prune-drop@1"
LAZY_THRESHOLD = 0.2


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
    # How the weights were loaded (absent in results written before these options existed: read as defaults).
    quantization: str | None = None  # e.g. "bitsandbytes-4bit-nf4"; None = the checkpoint's own weights
    attn_implementation: str | None = None
    model_args: dict[str, Any] = field(default_factory=dict)  # extra from_pretrained keywords (--model-args)

    @property
    def label(self) -> str:
        """The model's name for titles and summaries, marked when its weights were quantized."""
        return f"{self.id} ({self.quantization})" if self.quantization else self.id

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelInfo:
        values = {k: data.get(k) for k in cls.__dataclass_fields__}
        values["model_args"] = data.get("model_args") or {}
        return cls(**values)


@dataclass(frozen=True)
class RunInfo:
    """When and with what the result was produced."""

    started_at: str
    seconds: float
    versions: dict[str, str]
    device: str

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunInfo:
        return cls(**{k: data.get(k) for k in cls.__dataclass_fields__})


@dataclass(frozen=True)
class AngularResult:
    """The full angular-distance matrix between the inputs of every pair of blocks.

    `distance[i][j]` is the mean over measured positions of d(x^i, x^j), 0 <= i, j <= L, where x^i is
    the input of block i and x^L the output of the last block before any final norm.
    """

    model: ModelInfo
    data: dict[str, Any]
    distance: list[list[float]]
    nonfinite_tokens: int
    run: RunInfo
    tokens_per_second: float
    summary: dict[str, Any] = field(default_factory=dict)

    @property
    def num_layers(self) -> int:
        return len(self.distance) - 1

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": ANGULAR_SCHEMA,
            "model": asdict(self.model),
            "data": dict(self.data),
            "distance": self.distance,
            "nonfinite_tokens": self.nonfinite_tokens,
            "tokens_per_second": self.tokens_per_second,
            "summary": self.summary or angular_summary(self.distance),
            "run": asdict(self.run),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AngularResult:
        _check_schema(data, ANGULAR_SCHEMA)
        try:
            return cls(
                model=ModelInfo.from_dict(data["model"]),
                data=data["data"],
                distance=[[float(v) for v in row] for row in data["distance"]],
                nonfinite_tokens=int(data.get("nonfinite_tokens", 0)),
                run=RunInfo.from_dict(data["run"]),
                tokens_per_second=float(data.get("tokens_per_second", 0.0)),
                summary=data.get("summary") or angular_summary(data["distance"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ResultError(f"Malformed {ANGULAR_SCHEMA} result: {exc!r}") from exc


@dataclass(frozen=True)
class MetricDrop:
    """One metric of one task: the baseline and the score with each evaluated layer removed."""

    baseline: float
    baseline_stderr: float | None
    higher_is_better: bool
    layers: list[int]
    pruned: list[float]
    stderr: list[float | None]

    @property
    def delta(self) -> list[float]:
        return [p - self.baseline for p in self.pruned]

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["delta"] = self.delta
        # Keep the documented key order: baseline, ..., pruned, delta, stderr.
        return {
            k: out[k]
            for k in ("baseline", "baseline_stderr", "higher_is_better", "layers", "pruned", "delta", "stderr")
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MetricDrop:
        return cls(
            baseline=data["baseline"],
            baseline_stderr=data.get("baseline_stderr"),
            higher_is_better=bool(data.get("higher_is_better", True)),
            layers=[int(v) for v in data["layers"]],
            pruned=list(data["pruned"]),
            stderr=list(data.get("stderr") or [None] * len(data["layers"])),
        )


@dataclass(frozen=True)
class TaskDrop:
    """All metrics lm-eval (or the SQuAD scorer) reported for one task, in the order it reported them."""

    metrics: dict[str, MetricDrop]
    num_fewshot: int | None
    limit: float | None
    samples: int | None
    nonfinite: int = 0  # evaluations' inputs with NaN/inf model outputs (SQuAD windows): counted, never hidden

    @property
    def primary_metric(self) -> str:
        return next(iter(self.metrics))

    def to_dict(self) -> dict[str, Any]:
        return {
            "num_fewshot": self.num_fewshot,
            "limit": self.limit,
            "samples": self.samples,
            "nonfinite": self.nonfinite,
            "metrics": {name: m.to_dict() for name, m in self.metrics.items()},
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TaskDrop:
        return cls(
            metrics={k: MetricDrop.from_dict(v) for k, v in data["metrics"].items()},
            num_fewshot=data.get("num_fewshot"),
            limit=data.get("limit"),
            samples=data.get("samples"),
            nonfinite=int(data.get("nonfinite", 0)),
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


def angular_summary(distance: list[list[float]], threshold: float = LAZY_THRESHOLD) -> dict[str, Any]:
    """The numbers `compare` gates on, computed once so that humans and CI read the same values.

    A block l is "lazy" when d(x^l, x^(l+1)) < threshold: it barely turns its input.
    """
    num_layers = len(distance) - 1
    adjacent = [distance[l][l + 1] for l in range(num_layers)]
    finite_adjacent = [d for d in adjacent if math.isfinite(d)]
    most_redundant = {}
    for span in range(1, num_layers + 1):
        row = [(distance[l][l + span], l) for l in range(num_layers - span + 1) if math.isfinite(distance[l][l + span])]
        if row:
            value, start = min(row)
            most_redundant[str(span)] = {"layer": start, "distance": value}
    lazy = [l for l, d in enumerate(adjacent) if d < threshold]
    return {
        "lazy_threshold": threshold,
        "adjacent": adjacent,
        "lazy_layers": lazy,
        "lazy_count": len(lazy),
        "mean_adjacent": sum(finite_adjacent) / len(finite_adjacent) if finite_adjacent else None,
        "most_redundant": most_redundant,
    }


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
        }
    return out


def write_json(path: str | os.PathLike[str], data: dict[str, Any]) -> Path:
    """Write JSON atomically: a reader sees the old file or the new one, never half of one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes owner-only files; results are meant to be shared
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=2, allow_nan=True)
            handle.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


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


def load_result(path: str | os.PathLike[str]) -> AngularResult | PruneDropResult:
    """Read any layerprobe result file into its result object."""
    data = read_json(path)
    kind = str(data["schema"]).split("@")[0]
    if kind == ANGULAR_SCHEMA.split("@")[0]:
        return AngularResult.from_dict(data)
    if kind == PRUNE_DROP_SCHEMA.split("@")[0]:
        return PruneDropResult.from_dict(data)
    raise ResultError(f"{path}: unknown result schema {data['schema']!r}.")


def _check_schema(data: dict[str, Any], expected: str) -> None:
    schema = data.get("schema")
    if schema != expected:
        raise ResultError(f"Expected a {expected} result, got schema {schema!r}.")
