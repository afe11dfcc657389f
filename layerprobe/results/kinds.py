"""Result objects and the only code that reads or writes result JSON.

JSON is the source of truth: plots, `compare` and humans all read the same file, so every number a
later step needs (including the `summary` block) is written here at creation time. Files are written
atomically (temp file + rename) so a crash never leaves half a result behind.
"""

from __future__ import annotations

import json
import math
import os
import re
import secrets
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import layerprobe.results.validate as v
from layerprobe.core import ResultError
from layerprobe.results.validate import Node

if TYPE_CHECKING:
    pass

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

# What each record of a result file must hold, field by field (validate.py's readers). A field a newer
# layerprobe adds is one line here; optional fields keep older files readable.
MODEL_FIELDS: dict[str, v.Kind] = {
    "id": v.text(),
    "revision": v.text(optional=True),
    "commit": v.text(optional=True),
    "architecture": v.text(optional=True),
    "model_type": v.text(optional=True),
    "kind": v.text(optional=True),
    "dtype": v.text(optional=True),
    "num_layers": v.integer(minimum=1),
    "layer_path": v.text(optional=True),
    "block_class": v.text(optional=True),
    "quantization": v.text(optional=True),
    "attn_implementation": v.text(optional=True),
    "model_args": v.any_object(optional=True),
    "path": v.text(optional=True),
}
RUN_FIELDS: dict[str, v.Kind] = {
    "started_at": v.text(optional=True),
    "seconds": v.number(optional=True),
    "versions": v.string_map(optional=True),
    "device": v.text(optional=True),
    "prefix_reuse": v.text(optional=True),
}
ANGULAR_DATA_FIELDS: dict[str, v.Kind] = {
    "dataset": v.text(optional=True),
    "config": v.text(optional=True),
    "split": v.text(optional=True),
    "text_field": v.text(optional=True),
    "tokens": v.integer(optional=True, minimum=1),
    "seq_len": v.integer(optional=True, minimum=1),
    "windows": v.integer(optional=True, minimum=1),
    "positions": v.text(optional=True),
    "positions_averaged": v.integer(optional=True, minimum=0),
}
TASK_FIELDS: dict[str, v.Kind] = {
    "num_fewshot": v.integer(optional=True, minimum=0),
    "limit": v.number(optional=True, finite=True),
    "samples": v.integer(optional=True, minimum=0),
    "nonfinite": v.integer(default=0, minimum=0),
    "version": v.text(optional=True),
    "agreement": v.any_object(optional=True),  # metric → agreement with an angular result (agreement.py)
}
DEPTH_DATA_FIELDS: dict[str, v.Kind] = dict(ANGULAR_DATA_FIELDS)
SUBLAYER_PLACEMENT_FIELDS: dict[str, v.Kind] = {
    "module": v.text(),
    "residual": v.text(),
    "reads_norm": v.flag(),
    "output_norm": v.flag(),
    "normed_after": v.flag(),
}
SETTINGS_FIELDS: dict[str, v.Kind] = {
    "limit": v.number(optional=True, finite=True),
    "num_fewshot": v.integer(optional=True, minimum=0),
    "seed": v.integer(optional=True),
    "batch_size": v.text_or_integer(optional=True),
}


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
    path: str | None = None  # where the checkpoint was read from, when `id` is a display name (the demo)
    # How the weights were loaded (absent in results written before these options existed: read as defaults).
    quantization: str | None = None  # e.g. "bitsandbytes-4bit-nf4"; None = the checkpoint's own weights
    attn_implementation: str | None = None
    model_args: dict[str, Any] = field(default_factory=dict)  # extra from_pretrained keywords (--model-args)

    @property
    def label(self) -> str:
        """The model's name for titles and summaries, marked when its weights were quantized."""
        return f"{self.id} ({self.quantization})" if self.quantization else self.id

    @classmethod
    def from_dict(cls, data: dict[str, Any] | Node, source: str = "model") -> ModelInfo:
        values = v.read_fields(_node(data, source), MODEL_FIELDS)
        values["model_args"] = values.get("model_args") or {}
        return cls(**values)


@dataclass(frozen=True)
class RunInfo:
    """When and with what the result was produced."""

    started_at: str
    seconds: float
    versions: dict[str, str]
    device: str
    prefix_reuse: str | None = None  # prune-drop's shared engine: "on", "off" or "unavailable: <why>"

    @classmethod
    def from_dict(cls, data: dict[str, Any] | Node, source: str = "run") -> RunInfo:
        return cls(**v.read_fields(_node(data, source), RUN_FIELDS))


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
    def from_dict(cls, data: dict[str, Any], source: str = "angular result") -> AngularResult:
        """Validate every field (see `ANGULAR_DATA_FIELDS`, `MODEL_FIELDS`) and build the result.

        The stored `summary` is recomputed from `distance`, so it can never disagree with the matrix.

        Raises:
            ResultError: naming `source` and the JSON path of the first bad field.
        """
        root = Node(data, source)
        _check_schema(root, ANGULAR_SCHEMA)
        model = ModelInfo.from_dict(root.key("model"))
        distance = _distance_matrix(root.key("distance"))
        size = len(distance)
        stderr = _optional_matrix(root.key("distance_stderr"), size)  # absent before stderrs existed
        difference = _optional_matrix(root.key("row_difference_stderr"), size)
        if model.num_layers != len(distance) - 1:
            root.key("model").key("num_layers").fail(
                f"L = {len(distance) - 1} to match the {len(distance)}×{len(distance)} distance matrix",
                f"got {model.num_layers}",
            )
        return cls(
            model=model,
            data=v.checked_record(root.key("data"), ANGULAR_DATA_FIELDS),
            distance=distance,
            nonfinite_tokens=root.key("nonfinite_tokens").integer(default=0, minimum=0),
            run=RunInfo.from_dict(root.key("run")),
            tokens_per_second=root.key("tokens_per_second").number(default=0.0),
            summary=angular_summary(distance, stderr=stderr, difference_stderr=difference),
            distance_stderr=stderr,
            nonfinite_positions=_optional_matrix(root.key("nonfinite_positions"), size, integer=True),
            row_difference_stderr=difference,
        )


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
    def from_dict(cls, data: dict[str, Any] | Node, source: str = "metric") -> MetricDrop:
        """Validate one metric: `layers`, `pruned` and `stderr` must be parallel arrays of the right types."""
        node = _node(data, source)
        layers = [item.integer(minimum=0) for item in node.key("layers").items()]
        if len(set(layers)) != len(layers):
            node.key("layers").fail("an array of distinct block indices", f"got {layers}")
        pruned_node, stderr_node = node.key("pruned"), node.key("stderr")
        pruned = [item.number() for item in pruned_node.items()]
        stderr = (
            [item.number(optional=True) for item in stderr_node.items()]
            if stderr_node.present and stderr_node.value is not None
            else [None] * len(layers)
        )
        for name, values in (("pruned", pruned), ("stderr", stderr)):
            if len(values) != len(layers):
                node.key(name).fail(
                    f"an array of {len(layers)} items (one per entry of layers)", f"got {len(values)} items"
                )
        return cls(
            baseline=node.key("baseline").number(),
            baseline_stderr=node.key("baseline_stderr").number(optional=True),
            higher_is_better=node.key("higher_is_better").flag(default=True),
            layers=layers,
            pruned=pruned,
            stderr=stderr,
            delta_stderr=_per_layer(node.key("delta_stderr"), layers, lambda n: n.number(optional=True)),
            delta_ci95=_per_layer(node.key("delta_ci95"), layers, _interval),
            significant=_per_layer(node.key("significant"), layers, lambda n: n.flag(optional=True)),
            delta_method=node.key("delta_method").text(optional=True),
            bootstrap=_bootstrap(node.key("bootstrap")),
        )


@dataclass(frozen=True)
class TaskDrop:
    """All metrics lm-eval (or the SQuAD scorer) reported for one task, in the order it reported them."""

    metrics: dict[str, MetricDrop]
    num_fewshot: int | None
    limit: float | None
    samples: int | None
    nonfinite: int = 0  # evaluations' inputs with NaN/inf model outputs (SQuAD windows): counted, never hidden
    version: str | None = None  # lm-eval's version of the task (None for squad or older files)
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
            "version": self.version,
            "metrics": {name: m.to_dict() for name, m in self.metrics.items()},
        }
        if self.agreement is not None:
            out["agreement"] = self.agreement
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any] | Node, source: str = "task") -> TaskDrop:
        node = _node(data, source)
        fields = v.read_fields(node, TASK_FIELDS)
        metrics = {name: MetricDrop.from_dict(metric) for name, metric in node.key("metrics").entries(min_length=1)}
        return cls(metrics=metrics, **fields)


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
    def from_dict(cls, data: dict[str, Any], source: str = "prune-drop result") -> PruneDropResult:
        """Validate every field (see `TASK_FIELDS`, `MODEL_FIELDS`) and build the result.

        Removed blocks must lie in 0 … L−1; the stored `summary` is recomputed from the tasks.

        Raises:
            ResultError: naming `source` and the JSON path of the first bad field.
        """
        root = Node(data, source)
        _check_schema(root, PRUNE_DROP_SCHEMA)
        model = ModelInfo.from_dict(root.key("model"))
        tasks = {name: TaskDrop.from_dict(task) for name, task in root.key("tasks").entries(min_length=1)}
        for name, task in tasks.items():
            for metric_name, metric in task.metrics.items():
                outside = [layer for layer in metric.layers if layer >= model.num_layers]
                if outside:
                    root.key("tasks").key(name).key("metrics").key(metric_name).key("layers").fail(
                        f"block indices below L = {model.num_layers} (model.num_layers)", f"got {outside}"
                    )
        return cls(
            model=model,
            engine=root.key("engine").text(default="simple"),
            settings=v.checked_record(root.key("settings"), SETTINGS_FIELDS) if root.key("settings").present else {},
            tasks=tasks,
            run=RunInfo.from_dict(root.key("run")),
            summary=prune_drop_summary(tasks),
        )


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


def _optional_matrix(node: Node, size: int, integer: bool = False) -> list[list[Any]] | None:
    """A size×size matrix field that older files lack (absent or null: None), like `distance` in shape.

    Numbers may be NaN (a standard error that could not be estimated); counts are integers ≥ 0.
    """
    if not node.present or node.value is None:
        return None
    rows = node.items()
    if len(rows) != size:
        node.fail(f"an array of {size} rows (like the {size}×{size} distance matrix)", f"got {len(rows)} rows")
    matrix = []
    for row in rows:
        cells = row.items()
        if len(cells) != size:
            row.fail(f"an array of {size} items (like the distance matrix)", f"got {len(cells)} items")
        matrix.append([cell.integer(minimum=0) if integer else cell.number() for cell in cells])
    return matrix


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
    layerprobe writes goes through here. The temporary name carries the writer's pid
    (`.angular.json.<pid>-<hex>.tmp`), so the leftovers of a writer killed with SIGKILL, which no
    `finally` can remove, are recognised and removed by the next write into that directory
    (`remove_stale_temp_files`).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temp_files(path.parent)
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


# `.angular.json.<pid>-<8 hex>.tmp` (and the pid-less `.angular.json.<8 hex>.tmp` of earlier versions).
_TEMP_NAME = re.compile(r"^\..+\.(?:(\d+)-)?[0-9a-f]{8}\.tmp$")
_PROCESS_STARTED = time.time()
_CLEANED: set[Path] = set()


def remove_stale_temp_files(directory: Path) -> list[Path]:
    """Remove temporary files of `atomic_write` that no live writer holds; once per directory and process.

    A file counts as stale when its pid is not a running process, or, for the pid-less names of earlier
    versions, when it is older than this process. Only names of `atomic_write`'s own pattern are touched.
    """
    directory = Path(directory)
    key = directory.resolve()
    if key in _CLEANED:
        return []
    _CLEANED.add(key)
    removed = []
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return []
    for entry in entries:
        match = _TEMP_NAME.match(entry.name)
        if not match or not entry.is_file(follow_symlinks=False):
            continue
        try:
            stale = not _pid_alive(int(match[1])) if match[1] else entry.stat().st_mtime < _PROCESS_STARTED
            if stale:
                os.unlink(entry.path)
                removed.append(Path(entry.path))
        except OSError:  # another process removed it first, or it is not ours to remove
            continue
    return removed


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, OSError):
        return True  # exists but belongs to someone else, or cannot be asked: leave its file alone
    return True


def write_json(path: str | os.PathLike[str], data: dict[str, Any]) -> Path:
    """Write JSON atomically (see `atomic_write`)."""
    text = json.dumps(data, indent=2, allow_nan=True) + "\n"
    return atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


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
    except RecursionError:  # json recurses once per nesting level: "[[[[…" 100,000 deep
        raise ResultError(f"{path} is not a layerprobe result: its JSON is nested too deeply to read.") from None
    if not isinstance(data, dict) or not str(data.get("schema", "")).startswith("layerprobe/"):
        raise ResultError(f"{path} is not a layerprobe result (no 'schema': 'layerprobe/...').")
    return data


def load_result(path: str | os.PathLike[str]) -> AngularResult | PruneDropResult | DepthResult:
    """Read any layerprobe result file into its result object, validated field by field (validate.py).

    This is the one place a result file becomes a typed object: the gate and the plots never see raw JSON.
    """
    data = read_json(path)
    kind = str(data["schema"]).split("@")[0]
    if kind == ANGULAR_SCHEMA.split("@")[0]:
        return AngularResult.from_dict(data, str(path))
    if kind == PRUNE_DROP_SCHEMA.split("@")[0]:
        return PruneDropResult.from_dict(data, str(path))
    if kind == DEPTH_SCHEMA.split("@")[0]:
        return DepthResult.from_dict(data, str(path))
    if kind == PRUNE_CURVE_SCHEMA.split("@")[0]:
        return PruneCurveResult.from_dict(data)
    hint = None
    if kind == "layerprobe/compare":
        hint = "That is compare's verdict; pass the result files it compared (angular.json, prune_drop.json, …)."
    elif kind == "layerprobe/prune-drop-partial":
        hint = "That is an unfinished prune-drop run; finish it with prune-drop --resume first."
    raise ResultError(f"{path}: unknown result schema {data['schema']!r}.", hint=hint)


def _check_schema(root: Node, expected: str) -> None:
    schema = root.obj().get("schema")
    if schema != expected:
        raise ResultError(f"{root.source}: expected a {expected} result, got schema {schema!r}.")


def _node(data: dict[str, Any] | Node, source: str) -> Node:
    return data if isinstance(data, Node) else Node(data, source)


def _placement(node: Node, layers: int) -> Placement:
    """The `placement` block of depth.json: one label per block, its evidence, the model-level reading."""
    blocks = []
    for item in node.key("blocks").items():
        subs = {}
        for kind in ("attention", "mlp"):
            sub = item.key(kind)
            subs[kind] = (
                None
                if not sub.present or sub.value is None
                else SublayerPlacement(**v.read_fields(sub, SUBLAYER_PLACEMENT_FIELDS))
            )
        norms = item.key("norms")
        blocks.append(
            BlockPlacement(
                block=item.key("block").integer(minimum=0),
                label=item.key("label").text(),
                norms=norms.text_map() if norms.present and norms.value is not None else {},
                norm_scale=item.key("norm_scale").number(optional=True),
                reason=item.key("reason").text(optional=True),
                **subs,
            )
        )
    if len(blocks) != layers:
        node.key("blocks").fail(f"an array of L = {layers} blocks", f"got {len(blocks)} items")
    return Placement(
        blocks=blocks,
        pattern=node.key("pattern").text(),
        summary=node.key("summary").text(),
        transition=node.key("transition").integer(optional=True, minimum=0),
    )


def _per_layer(node: Node, layers: list[int], read: Callable[[Node], Any]) -> list[Any] | None:
    """An optional array with one entry per removed layer (absent or null in older files: None)."""
    if not node.present or node.value is None:
        return None
    values = [read(item) for item in node.items()]
    if len(values) != len(layers):
        node.fail(f"an array of {len(layers)} items (one per entry of layers)", f"got {len(values)} items")
    return values


def _interval(node: Node) -> list[float] | None:
    """A [low, high] pair of numbers, or null."""
    if node.value is None:
        return None
    bounds = [item.number() for item in node.items()]
    if len(bounds) != 2:
        node.fail("null or an array [low, high]", f"got {len(bounds)} items")
    return bounds


def _bootstrap(node: Node) -> dict[str, int] | None:
    if not node.present or node.value is None:
        return None
    return {name: int(item.integer()) for name, item in node.entries()}


def _distance_matrix(node: Node) -> list[list[float]]:
    """An (L+1)×(L+1) matrix of distances in [0, 1] (or NaN), L ≥ 1; a ragged or empty one is refused."""
    rows = node.items()
    size = len(rows)
    if size < 2:
        node.fail("an (L+1)×(L+1) matrix with L ≥ 1 block", f"got {size} row{'s' if size != 1 else ''}")
    matrix = []
    for row in rows:
        cells = row.items()
        if len(cells) != size:
            row.fail(f"an array of {size} numbers (the matrix has {size} rows)", f"got {len(cells)} items")
        matrix.append([cell.number(low=0.0, high=1.0) for cell in cells])
    return matrix


# --- layerprobe depth ------------------------------------------------------------------------------


# Norm placement labels (model/placement.py decides them by tracing; depth.json records them).
PRE_LN, POST_LN, SANDWICH, PARALLEL, UNRECOGNISED = "Pre-LN", "Post-LN", "sandwich", "parallel", "unrecognised"
MIX_LN, LNS = "Mix-LN", "LayerNorm Scaling"


@dataclass(frozen=True)
class SublayerPlacement:
    """What the trace says about one sublayer's norms (see the module docstring)."""

    module: str
    residual: str
    reads_norm: bool
    output_norm: bool
    normed_after: bool


@dataclass(frozen=True)
class BlockPlacement:
    """The placement label of one block, the evidence behind it, and any norm-output scale."""

    block: int
    label: str
    norms: dict[str, str] = field(default_factory=dict)  # module path → "LayerNorm" | "RMSNorm"
    norm_scale: float | None = None
    attention: SublayerPlacement | None = None
    mlp: SublayerPlacement | None = None
    reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BlockPlacement:
        subs = {k: SublayerPlacement(**data[k]) if data.get(k) else None for k in ("attention", "mlp")}
        return cls(
            block=int(data["block"]),
            label=str(data["label"]),
            norms=dict(data.get("norms") or {}),
            norm_scale=data.get("norm_scale"),
            reason=data.get("reason"),
            **subs,
        )


@dataclass(frozen=True)
class Placement:
    """Per-block labels and the model-level reading of them."""

    blocks: list[BlockPlacement]
    pattern: str
    summary: str
    transition: int | None = None

    @property
    def labels(self) -> list[str]:
        return [b.label for b in self.blocks]

    def to_dict(self) -> dict[str, Any]:
        return {
            "pattern": self.pattern,
            "summary": self.summary,
            "transition": self.transition,
            "labels": self.labels,
            "blocks": [b.to_dict() for b in self.blocks],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Placement:
        return cls(
            blocks=[BlockPlacement.from_dict(b) for b in data["blocks"]],
            pattern=str(data["pattern"]),
            summary=str(data["summary"]),
            transition=data.get("transition"),
        )


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
    def from_dict(
        cls, data: dict[str, Any] | Node, source: str = "spread", length: int | None = None, length_name: str = "L"
    ) -> Spread:
        """Five parallel arrays (`length` entries each, named `length_name` in errors); NaN allowed, counts ≥ 0."""
        node = _node(data, source)
        values = {name: [item.number() for item in node.key(name).items()] for name in ("mean", "std", "min", "max")}
        values["count"] = [item.integer(minimum=0) for item in node.key("count").items()]
        expected = len(values["mean"]) if length is None else length
        for name, items in values.items():
            if len(items) != expected:
                node.key(name).fail(f"an array of {length_name} = {expected} items", f"got {len(items)} items")
        return cls(**values)


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
    def from_dict(cls, data: dict[str, Any] | Node, source: str = "grad", length: int | None = None) -> GradNorms:
        node = _node(data, source)
        block = [item.number(optional=True) for item in node.key("block").items()]
        if length is not None and len(block) != length:
            node.key("block").fail(f"an array of L = {length} items", f"got {len(block)} items")
        subs = node.key("sublayers")
        sublayers = None
        if subs.present and subs.value is not None:
            sublayers = {
                kind: [item.number(optional=True) for item in values.items()] for kind, values in subs.entries()
            }
        settings = node.key("settings")
        return cls(
            loss=node.key("loss").text(),
            mean_loss=node.key("mean_loss").number(),
            positions=node.key("positions").integer(minimum=0),
            block=block,
            sublayers=sublayers,
            settings=dict(settings.obj()) if settings.present and settings.value is not None else {},
            peak_memory_bytes=node.key("peak_memory_bytes").integer(optional=True, minimum=0),
        )


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
    def from_dict(cls, data: dict[str, Any], source: str = "depth result") -> DepthResult:
        """Validate every field (lengths L+1 for the residual, L for updates, sublayers and gradients).

        Raises:
            ResultError: naming `source` and the JSON path of the first bad field.
        """
        root = Node(data, source)
        _check_schema(root, DEPTH_SCHEMA)
        model = ModelInfo.from_dict(root.key("model"))
        layers = model.num_layers
        update = Spread.from_dict(root.key("update").key("relative"), length=layers)
        residual = root.key("residual")
        subs = root.key("sublayers")
        sublayers = None
        if subs.present and subs.value is not None:
            sublayers = {}
            for kind, entry in subs.entries():
                modules = [item.text(optional=True) for item in entry.key("modules").items()]
                if len(modules) != layers:
                    entry.key("modules").fail(f"an array of L = {layers} items", f"got {len(modules)} items")
                sublayers[kind] = {
                    "modules": modules,
                    "relative": Spread.from_dict(entry.key("relative"), length=layers),
                }
        grad = root.key("grad")
        result = cls(
            model=model,
            data=v.checked_record(root.key("data"), DEPTH_DATA_FIELDS),
            placement=_placement(root.key("placement"), layers),
            rms=Spread.from_dict(residual.key("rms"), length=layers + 1, length_name="L+1"),
            variance=Spread.from_dict(residual.key("variance"), length=layers + 1, length_name="L+1"),
            update=update,
            sublayers=sublayers,
            grad=None if not grad.present or grad.value is None else GradNorms.from_dict(grad, length=layers),
            nonfinite_tokens=root.key("nonfinite_tokens").integer(default=0, minimum=0),
            run=RunInfo.from_dict(root.key("run")),
        )
        return replace(result, summary=depth_summary(result))  # recomputed: never trusted from the file


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


# --- prune_curve.json (`layerprobe/prune-curve@1`): score vs fraction of blocks removed, per method ---

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


def variant_label(settings: dict[str, Any]) -> str:
    """How a result's variant index reads, from its settings (e.g. "removed block", "mlp removed (block)")."""
    unit, span = settings.get("unit", "block"), settings.get("span", 1)
    if unit != "block":
        return f"{unit} removed (block)"
    return "removed block" if span == 1 else f"removed blocks l…l+{span - 1} (start l)"
