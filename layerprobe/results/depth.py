"""depth.json (`layerprobe/depth@1`): residual growth, per-block and per-sublayer updates, norm placement.

Indices: the residual statistics have L+1 entries (x^0 … x^L, x^L before any final norm); the updates,
the sublayers, the gradient norms and the placement have L (block l). Norm placement is decided by
tracing in model/placement.py; its labels and records live here because depth.json holds them.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, TypedDict

import layerprobe.results.validate as v
from layerprobe.results.angular import ANGULAR_DATA_FIELDS
from layerprobe.results.export_record import PrunedFrom
from layerprobe.results.io import DEPTH_SCHEMA, check_schema
from layerprobe.results.json_types import JSONObject, Record
from layerprobe.results.notebook import Notebook, Table
from layerprobe.results.provenance import ModelInfo, RunInfo
from layerprobe.results.rundir import RunDir
from layerprobe.results.validate import Node

SUBLAYER_KINDS = ("attention", "mlp")
# Norm placement labels (model/placement.py decides them by tracing; depth.json records them).
PRE_LN, POST_LN, SANDWICH, PARALLEL, UNRECOGNISED = "Pre-LN", "Post-LN", "sandwich", "parallel", "unrecognised"
MIX_LN, LNS = "Mix-LN", "LayerNorm Scaling"
DEPTH_DATA_FIELDS: dict[str, v.Kind] = dict(ANGULAR_DATA_FIELDS)
SUBLAYER_PLACEMENT_FIELDS: dict[str, v.Kind] = {
    "module": v.text(),
    "residual": v.text(),
    "reads_norm": v.flag(),
    "output_norm": v.flag(),
    "normed_after": v.flag(),
}


@dataclass(frozen=True)
class SublayerPlacement:
    """What the trace says about one sublayer's norms (see model/placement.py)."""

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

    def to_dict(self) -> dict[str, object]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: JSONObject | Node, source: str = "block") -> BlockPlacement:
        node = Node.of(data, source)
        subs = {}
        for kind in SUBLAYER_KINDS:
            sub = node.key(kind)
            subs[kind] = SublayerPlacement(**v.read_fields(sub, SUBLAYER_PLACEMENT_FIELDS)) if sub.given else None
        norms = node.key("norms")
        return cls(
            block=node.key("block").integer(minimum=0),
            label=node.key("label").text(),
            norms=norms.text_map() if norms.given else {},
            norm_scale=node.key("norm_scale").number(optional=True),
            reason=node.key("reason").text(optional=True),
            attention=subs["attention"],
            mlp=subs["mlp"],
        )


@dataclass(frozen=True)
class Placement:
    """Per-block labels and the model-level reading of them.

    `pruned_from` is set when the model is a checkpoint `layerprobe prune` exported: block l is then block
    `pruned_from.kept_blocks[l]` of its source, which is how `compare` pairs the blocks of the two.
    """

    blocks: list[BlockPlacement]
    pattern: str
    summary: str
    transition: int | None = None
    pruned_from: PrunedFrom | None = None

    @property
    def labels(self) -> list[str]:
        return [b.label for b in self.blocks]

    def to_dict(self) -> dict[str, object]:
        return {
            "pattern": self.pattern,
            "summary": self.summary,
            "transition": self.transition,
            "labels": self.labels,
            "blocks": [b.to_dict() for b in self.blocks],
            "pruned_from": None if self.pruned_from is None else self.pruned_from.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: JSONObject | Node, source: str = "placement", layers: int | None = None) -> Placement:
        """One label per block (`layers` of them when given), its evidence, and the model-level reading."""
        node = Node.of(data, source)
        blocks = [BlockPlacement.from_dict(item) for item in node.key("blocks").items()]
        if layers is not None and len(blocks) != layers:
            node.key("blocks").fail(f"an array of L = {layers} blocks", f"got {len(blocks)} items")
        recorded = node.key("pruned_from")
        pruned_from = PrunedFrom.from_dict(recorded) if recorded.given else None
        if pruned_from is not None and len(pruned_from.kept_blocks) != len(blocks):
            recorded.key("kept_blocks").fail(f"one source block per block ({len(blocks)})")
        return cls(
            blocks=blocks,
            pattern=node.key("pattern").text(),
            summary=node.key("summary").text(),
            transition=node.key("transition").integer(optional=True, minimum=0),
            pruned_from=pruned_from,
        )


@dataclass(frozen=True)
class Spread:
    """Per-index statistics over measured positions: mean, population std, min, max, count."""

    mean: list[float]
    std: list[float]
    min: list[float]
    max: list[float]
    count: list[int]

    def to_dict(self) -> dict[str, object]:
        return asdict(self)

    @classmethod
    def from_dict(
        cls, data: JSONObject | Node, source: str = "spread", length: int | None = None, length_name: str = "L"
    ) -> Spread:
        """Five parallel arrays (`length` entries each, named `length_name` in errors); NaN allowed, counts ≥ 0.

        Every spread layerprobe writes is of a non-negative quantity (an RMS, a variance, a relative update
        ‖Δ‖/‖x‖), so every number is ≥ 0, and a mean outside its own [min, max] is refused.
        """
        node = Node.of(data, source)
        numbers = {
            name: [item.number(low=0.0) for item in node.key(name).items()] for name in ("mean", "std", "min", "max")
        }
        count = [item.integer(minimum=0) for item in node.key("count").items()]
        expected = len(numbers["mean"]) if length is None else length
        for name, size in [*((name, len(items)) for name, items in numbers.items()), ("count", len(count))]:
            if size != expected:
                node.key(name).fail(f"an array of {length_name} = {expected} items", f"got {size} items")
        for i, (mean, low, high) in enumerate(zip(numbers["mean"], numbers["min"], numbers["max"], strict=True)):
            if low - 1e-6 * max(1.0, abs(mean)) > mean or mean > high + 1e-6 * max(1.0, abs(mean)):
                node.key("mean").fail(f"means within [min, max] (index {i}: [{low:g}, {high:g}])", f"got {mean:g}")
        return cls(numbers["mean"], numbers["std"], numbers["min"], numbers["max"], count)


@dataclass(frozen=True)
class GradNorms:
    """‖∇θ mean loss‖ per block and per sublayer (parameters as in `sublayers.Sublayer.parameters`)."""

    loss: str  # "next-token" | "masked-lm"
    mean_loss: float
    positions: int
    block: list[float]
    sublayers: dict[str, list[float | None]] | None
    settings: Record = field(default_factory=dict)
    peak_memory_bytes: int | None = None

    def to_dict(self) -> dict[str, object]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: JSONObject | Node, source: str = "grad", length: int | None = None) -> GradNorms:
        node = Node.of(data, source)
        block = [item.number(low=0.0) for item in node.key("block").items()]
        if length is not None and len(block) != length:
            node.key("block").fail(f"an array of L = {length} items", f"got {len(block)} items")
        subs = node.key("sublayers")
        sublayers = None
        if subs.given:
            sublayers = {
                kind: [item.number(optional=True, low=0.0) for item in values.items()]
                for kind, values in subs.entries()
            }
        settings = node.key("settings")
        return cls(
            loss=node.key("loss").text(),
            mean_loss=node.key("mean_loss").number(low=0.0),
            positions=node.key("positions").integer(minimum=0),
            block=block,
            sublayers=sublayers,
            settings=dict(settings.obj()) if settings.given else {},
            peak_memory_bytes=node.key("peak_memory_bytes").integer(optional=True, minimum=0),
        )


class _DepthSummaryFields(TypedDict):
    rms_growth: float | None
    placement: str
    placement_pattern: str
    mean_relative_update: float | None
    smallest_update: dict[str, float] | None


class DepthSummary(_DepthSummaryFields, total=False):
    """The numbers `compare` gates on and a reader wants first (see `depth_summary`)."""

    grad_ratio_last_first: float | None  # with --grad only


@dataclass(frozen=True, repr=False)
class DepthResult(Notebook):
    """Residual stream and update statistics across depth, plus norm placement (and gradient norms).

    Indices: `rms` and `variance` have L+1 entries (x^0 … x^L, x^L before any final norm); `update`
    and each sublayer have L entries (block l). `summary` is None until the result is read back
    (`to_dict` computes it).
    """

    model: ModelInfo
    data: Record
    placement: Placement
    rms: Spread
    variance: Spread
    update: Spread
    # kind → {"modules": [L module paths or None], "relative": Spread}; built as plain dicts by measure/depth.py
    sublayers: dict[str, dict[str, Any]] | None
    grad: GradNorms | None
    nonfinite_tokens: int
    run: RunInfo
    summary: DepthSummary | None = None

    @property
    def num_layers(self) -> int:
        return len(self.update.mean)

    def table(self) -> Table:
        """Per block l: its placement, RMS of its input x^l and output x^(l+1), relative update, gradient norm."""
        layers = range(self.num_layers)
        table: Table = {
            "block": list(layers),
            "placement": [self.placement.blocks[l].label for l in layers],
            "rms_in": self.rms.mean[:-1],
            "rms_out": self.rms.mean[1:],
            "relative_update": list(self.update.mean),
        }
        for kind, entry in (self.sublayers or {}).items():
            table[f"{kind}_update"] = list(entry["relative"].mean)
        if self.grad is not None:
            table["grad_norm"] = list(self.grad.block)
        return table

    def headline(self) -> str:
        growth = (self.summary or depth_summary(self))["rms_growth"]
        return (
            f"{self.model.id}: {self.num_layers} blocks, {self.placement.summary}, residual growth "
            + (f"{growth:.3g}×" if growth is not None else "unmeasured")
            + (", with gradient norms" if self.grad is not None else "")
        )

    def run_file(self, run: RunDir) -> Path:
        return run.depth_json

    def to_dict(self) -> dict[str, object]:
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
    def from_dict(cls, data: JSONObject, source: str = "depth result") -> DepthResult:
        """Validate every field (lengths L+1 for the residual, L for updates, sublayers and gradients).

        Raises:
            ResultError: naming `source` and the JSON path of the first bad field.
        """
        root = Node(data, source)
        check_schema(root, DEPTH_SCHEMA)
        model = ModelInfo.from_dict(root.key("model"))
        layers = model.num_layers
        update = Spread.from_dict(root.key("update").key("relative"), length=layers)
        residual = root.key("residual")
        subs = root.key("sublayers")
        sublayers = None
        if subs.given:
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
            placement=Placement.from_dict(root.key("placement"), layers=layers),
            rms=Spread.from_dict(residual.key("rms"), length=layers + 1, length_name="L+1"),
            variance=Spread.from_dict(residual.key("variance"), length=layers + 1, length_name="L+1"),
            update=update,
            sublayers=sublayers,
            grad=GradNorms.from_dict(grad, length=layers) if grad.given else None,
            nonfinite_tokens=root.key("nonfinite_tokens").integer(default=0, minimum=0),
            run=RunInfo.from_dict(root.key("run")),
        )
        return replace(result, summary=depth_summary(result))  # recomputed: never trusted from the file


def depth_summary(result: DepthResult) -> DepthSummary:
    """The numbers `compare` gates on and a reader wants first.

    `rms_growth` = mean RMS of x^L / mean RMS of x^0: how much the residual stream grows across the
    stack (the Curse of Depth's symptom under Pre-LN; ≈ 1 under Post-LN, whose every block renormalises).
    """
    rms = result.rms.mean
    growth = rms[-1] / rms[0] if rms and rms[0] and math.isfinite(rms[0]) else None
    updates = [(u, l) for l, u in enumerate(result.update.mean) if math.isfinite(u)]
    out: DepthSummary = {
        "rms_growth": growth,
        "placement": result.placement.summary,
        "placement_pattern": result.placement.pattern,
        "mean_relative_update": sum(u for u, _ in updates) / len(updates) if updates else None,
        "smallest_update": None if not updates else {"layer": min(updates)[1], "relative": min(updates)[0]},
    }
    if result.grad is not None:
        block = result.grad.block
        out["grad_ratio_last_first"] = (
            block[-1] / block[0] if any(math.isfinite(g) for g in block) and block[0] else None
        )
    return out
