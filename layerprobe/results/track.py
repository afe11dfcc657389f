"""track.json (`layerprobe/track@1`): how a run's checkpoints change, one entry per run directory, in order.

`layerprobe track` reads the results of several run directories (a training run's checkpoints, a release
series) and keeps, per run, where it came from (model, revision, commit, step, source files) and the
numbers a training team watches, each with its 95 % interval: the lazy-block count as a range, the mean
adjacent distance, each task's baseline and the ΔP of the watched blocks, residual growth, the gradient
signature, and the per-block series the heat strip draws. The statistics are computed in the review room
(docs/methods.md, "The history of several runs"); this module only holds them, writes them and validates
them on the way back in.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import PurePath
from typing import Any

from layerprobe.results.io import TRACK_SCHEMA, check_schema
from layerprobe.results.json_types import JSONObject
from layerprobe.results.validate import Node, interval, score_range

ORDERS = ("step", "given")  # by training step, or as the run directories were given
ALIGNS = ("block", "relative")  # per-block series by block index, or at relative depth (l + 0.5) / L
STEP_SOURCES = ("revision", "directory")
INDEPENDENT_BLOCKS = "assumes blocks independent"  # the fallback stderr of the mean adjacent distance
WINDOWS = "windows"  # the stderr from per-window values (the ratio estimator)


@dataclass(frozen=True)
class TrackAngular:
    """One run's angular numbers: lazy blocks as a 95 % range, the mean adjacent distance, per-block series.

    `surely_below` counts blocks whose 95 % upper bound d + z·SE is below the threshold, `possibly_below`
    those whose lower bound d − z·SE is; both None without standard errors. `adjacent` and
    `adjacent_stderr` are d(x^l, x^(l+1)) per block l (the heat strip's row).
    """

    lazy_threshold: float
    lazy_count: int
    surely_below: int | None
    possibly_below: int | None
    mean_adjacent: float | None
    mean_adjacent_stderr: float | None
    mean_adjacent_ci95: list[float] | None
    stderr_method: str | None  # WINDOWS, INDEPENDENT_BLOCKS, or None without standard errors
    adjacent: list[float]
    adjacent_stderr: list[float] | None

    @classmethod
    def from_dict(cls, node: Node) -> TrackAngular:
        stderr = node.key("adjacent_stderr")
        adjacent = [item.number(low=0.0, high=1.0) for item in node.key("adjacent").items(min_length=1)]
        stderrs = [item.number(low=0.0) for item in stderr.items()] if stderr.given else None
        if stderrs is not None and len(stderrs) != len(adjacent):
            stderr.fail(f"an array of {len(adjacent)} items (one per block, like adjacent)", f"got {len(stderrs)}")
        method = node.key("stderr_method")
        if method.given and method.value not in (WINDOWS, INDEPENDENT_BLOCKS):
            method.fail(f'"{WINDOWS}", "{INDEPENDENT_BLOCKS}" or null')
        mean = node.key("mean_adjacent").number(optional=True, low=0.0, high=1.0)
        counts = {
            name: node.key(name).integer(optional=name != "lazy_count", minimum=0)
            for name in ("lazy_count", "surely_below", "possibly_below")
        }
        for name, count in counts.items():
            if count is not None and count > len(adjacent):
                node.key(name).fail(f"a count of at most {len(adjacent)} blocks", f"got {count}")
        return cls(
            lazy_threshold=node.key("lazy_threshold").number(finite=True, low=0.0, high=1.0),
            lazy_count=counts["lazy_count"] or 0,
            surely_below=counts["surely_below"],
            possibly_below=counts["possibly_below"],
            mean_adjacent=mean,
            mean_adjacent_stderr=node.key("mean_adjacent_stderr").number(optional=True, low=0.0),
            mean_adjacent_ci95=interval(node.key("mean_adjacent_ci95"), estimate=mean)
            if node.key("mean_adjacent_ci95").given
            else None,
            stderr_method=method.text(optional=True),
            adjacent=adjacent,
            adjacent_stderr=stderrs,
        )


@dataclass(frozen=True)
class WatchedDelta:
    """ΔP of one watched block in one run, with its paired 95 % interval (None where the file has none).

    `watched` is the block as asked (`--watch`, or the first run's most harmful block); `block` the block
    of this run it stands for (the same index, or the block at the same relative depth with
    `--align relative`). `delta` is None when this run did not remove that block.
    """

    watched: int
    block: int
    delta: float | None
    delta_ci95: list[float] | None
    significant: bool | None

    @classmethod
    def from_dict(cls, node: Node) -> WatchedDelta:
        delta = node.key("delta").number(optional=True)
        return cls(
            watched=node.key("watched").integer(minimum=0),
            block=node.key("block").integer(minimum=0),
            delta=delta,
            delta_ci95=interval(node.key("delta_ci95"), estimate=delta) if node.key("delta_ci95").given else None,
            significant=node.key("significant").flag(optional=True),
        )


@dataclass(frozen=True)
class TrackTask:
    """One task's primary metric in one run: the full model's score with its 95 % interval, and watched ΔP."""

    metric: str
    higher_is_better: bool
    baseline: float
    baseline_stderr: float | None
    baseline_ci95: list[float] | None
    watched: list[WatchedDelta]

    @classmethod
    def from_dict(cls, node: Node) -> TrackTask:
        metric = node.key("metric").text()
        baseline = node.key("baseline").number(low=score_range(metric)[0], high=score_range(metric)[1])
        return cls(
            metric=metric,
            higher_is_better=node.key("higher_is_better").flag(),
            baseline=baseline,
            baseline_stderr=node.key("baseline_stderr").number(optional=True, low=0.0),
            baseline_ci95=interval(node.key("baseline_ci95"), estimate=baseline)
            if node.key("baseline_ci95").given
            else None,
            watched=[WatchedDelta.from_dict(item) for item in node.key("watched").items()],
        )


@dataclass(frozen=True)
class TrackDepth:
    """One run's depth numbers: residual growth RMS(x^L)/RMS(x^0), the placement, and with --grad the gradients."""

    rms_growth: float | None
    placement: str
    grad: list[float] | None  # ‖∇θ_l loss‖ per block: the gradient-norm signature
    grad_loss: str | None
    grad_ratio_last_first: float | None

    @classmethod
    def from_dict(cls, node: Node) -> TrackDepth:
        grad = node.key("grad")
        return cls(
            rms_growth=node.key("rms_growth").number(optional=True, low=0.0),
            placement=node.key("placement").text(),
            grad=[item.number(low=0.0) for item in grad.items()] if grad.given else None,
            grad_loss=node.key("grad_loss").text(optional=True),
            grad_ratio_last_first=node.key("grad_ratio_last_first").number(optional=True, low=0.0),
        )


@dataclass(frozen=True)
class CurvePoints:
    """One selection method's pruning curve: ΔP at each fraction of blocks removed, with 95 % intervals."""

    fraction: list[float]
    delta: list[float]
    delta_ci95: list[list[float] | None]

    @classmethod
    def from_dict(cls, node: Node) -> CurvePoints:
        fraction = [item.number(low=0.0, high=1.0) for item in node.key("fraction").items()]
        delta = [item.number() for item in node.key("delta").items()]
        ci = [
            interval(item, estimate=delta[k] if k < len(delta) else None)
            for k, item in enumerate(node.key("delta_ci95").items())
        ]
        for name, size in (("delta", len(delta)), ("delta_ci95", len(ci))):
            if size != len(fraction):
                node.key(name).fail(f"an array of {len(fraction)} items (one per fraction)", f"got {size} items")
        return cls(fraction, delta, ci)


@dataclass(frozen=True)
class TrackCurve:
    """One task's pruning curves in one run (its first metric), per selection method."""

    metric: str
    baseline: float
    methods: dict[str, CurvePoints]

    @classmethod
    def from_dict(cls, node: Node) -> TrackCurve:
        return cls(
            metric=node.key("metric").text(),
            baseline=node.key("baseline").number(),
            methods={name: CurvePoints.from_dict(m) for name, m in node.key("methods").entries(min_length=1)},
        )


@dataclass(frozen=True)
class TrackHeal:
    """One run's heal.json: the method and cut, and per metric the healed model's held-out value and recovery.

    `metrics` maps nll, kl and top1_agreement to {"original", "pruned", "pruned_ci95", "healed",
    "healed_ci95", "recovery", "recovery_ci95"} (recovery and its interval None where heal.json says it is
    not defined; original and pruned None in a track.json written before they were recorded).
    """

    method: str
    removed: list[int]
    metrics: dict[str, dict[str, Any]]

    @classmethod
    def from_dict(cls, node: Node) -> TrackHeal:
        metrics = {}
        for name, entry in node.key("metrics").entries(min_length=1):
            metrics[name] = {
                "original": entry.key("original").number(optional=True),  # absent in older track.json files
                "pruned": entry.key("pruned").number(optional=True),
                "pruned_ci95": interval(entry.key("pruned_ci95")),
                "healed": entry.key("healed").number(),
                "healed_ci95": interval(entry.key("healed_ci95")),
                "recovery": entry.key("recovery").number(optional=True),
                "recovery_ci95": interval(entry.key("recovery_ci95")),
            }
        return cls(
            method=node.key("method").text(),
            removed=[item.integer(minimum=0) for item in node.key("removed").items(min_length=1)],
            metrics=metrics,
        )


@dataclass(frozen=True)
class TrackRun:
    """One run directory: where its results came from, its place in the order, and its numbers.

    `positions` places each per-block series: block l at l, or at (l + 0.5) / L with `--align relative`.
    """

    label: str
    directory: str
    model: str
    revision: str | None
    commit: str | None
    num_layers: int
    step: int | None
    step_from: str | None  # "revision" or "directory": where the step was read
    files: dict[str, str]  # result kind → the file it was read from
    positions: list[float]
    angular: TrackAngular | None = None
    prune_drop: dict[str, TrackTask] | None = None
    depth: TrackDepth | None = None
    prune_curve: dict[str, TrackCurve] | None = None
    heal: TrackHeal | None = None

    @classmethod
    def from_dict(cls, node: Node) -> TrackRun:
        num_layers = node.key("num_layers").integer(minimum=1)
        positions = [item.number(finite=True) for item in node.key("positions").items()]
        if len(positions) != num_layers:
            node.key("positions").fail(f"an array of num_layers = {num_layers} items", f"got {len(positions)}")
        step_from = node.key("step_from")
        if step_from.given and step_from.value not in STEP_SOURCES:
            step_from.fail('"revision", "directory" or null')
        angular, drop, depth, curve = (node.key(k) for k in ("angular", "prune_drop", "depth", "prune_curve"))
        run = cls(
            label=node.key("label").text(),
            directory=node.key("directory").text(),
            model=node.key("model").text(),
            revision=node.key("revision").text(optional=True),
            commit=node.key("commit").text(optional=True),
            num_layers=num_layers,
            step=node.key("step").integer(optional=True, minimum=0),
            step_from=step_from.text(optional=True),
            files=node.key("files").text_map(),
            positions=positions,
            angular=TrackAngular.from_dict(angular) if angular.given else None,
            prune_drop={k: TrackTask.from_dict(t) for k, t in drop.entries()} if drop.given else None,
            depth=TrackDepth.from_dict(depth) if depth.given else None,
            prune_curve={k: TrackCurve.from_dict(c) for k, c in curve.entries()} if curve.given else None,
            heal=TrackHeal.from_dict(node.key("heal")) if node.key("heal").given else None,
        )
        for kind, field, series in (
            ("angular", "adjacent", run.angular and run.angular.adjacent),
            ("depth", "grad", run.depth and run.depth.grad),
        ):
            if series and len(series) != num_layers:
                node.key(kind).key(field).fail(f"an array of num_layers = {num_layers} items", f"got {len(series)}")
        return run


@dataclass(frozen=True)
class TrackResult:
    """The history of several runs of one model, in order (see the module docstring).

    `watch` maps each task to the blocks whose ΔP is followed; `watch_source` says who chose them.
    `confidence` is the level of every interval (0.95) and `z` its normal quantile (1.96).
    """

    order: str
    align: str
    runs: list[TrackRun]
    watch: dict[str, list[int]]
    watch_source: str
    mixed: bool = False
    notes: list[str] | None = None
    confidence: float = 0.95
    z: float = 1.96

    @property
    def name(self) -> str:
        """The model followed: its id; the training run's folder for sibling checkpoints; several ids when mixed."""
        ids = list(dict.fromkeys(run.model for run in self.runs))
        if len(ids) == 1:
            return ids[0]
        if not self.mixed:
            return f"{PurePath(ids[0]).parent} ({len(ids)} checkpoints)"
        return ", ".join(ids)

    @property
    def kinds(self) -> list[str]:
        """The result kinds at least one run has, in a fixed order."""
        return [k for k in ("angular", "prune_drop", "depth", "prune_curve") if any(getattr(r, k) for r in self.runs)]

    def to_dict(self) -> dict[str, object]:
        return {
            "schema": TRACK_SCHEMA,
            "order": self.order,
            "align": self.align,
            "confidence": self.confidence,
            "z": self.z,
            "mixed": self.mixed,
            "watch": {"source": self.watch_source, "blocks": self.watch},
            "notes": list(self.notes or []),
            "runs": [asdict(run) for run in self.runs],
        }

    @classmethod
    def from_dict(cls, data: JSONObject, source: str = "track result") -> TrackResult:
        """Validate every field and build the result.

        Raises:
            ResultError: naming `source` and the JSON path of the first bad field.
        """
        root = Node(data, source)
        check_schema(root, TRACK_SCHEMA)
        for name, allowed in (("order", ORDERS), ("align", ALIGNS)):
            if root.key(name).text() not in allowed:
                root.key(name).fail(" or ".join(f'"{a}"' for a in allowed))
        runs = [TrackRun.from_dict(item) for item in root.key("runs").items(min_length=1)]
        watch = root.key("watch")
        return cls(
            order=root.key("order").text(),
            align=root.key("align").text(),
            runs=runs,
            watch={
                task: [b.integer(minimum=0) for b in blocks.items()] for task, blocks in watch.key("blocks").entries()
            },
            watch_source=watch.key("source").text(),
            mixed=root.key("mixed").flag(default=False),
            notes=[item.text() for item in root.key("notes").items()] if root.key("notes").given else [],
            confidence=root.key("confidence").number(finite=True, low=0.0, high=1.0),
            z=root.key("z").number(finite=True),
        )
