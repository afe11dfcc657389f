"""The `layerprobe depth` result (schema layerprobe/depth@1): residual growth, updates, gradients, placement.

Kept beside `results.py` (which owns the other kinds) and written with its atomic `write_json`; every
number `compare` and the plots need is stored, so neither ever reads a model.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from layerprobe.errors import ResultError
from layerprobe.placement import Placement
from layerprobe.results import ModelInfo, RunInfo

DEPTH_SCHEMA = "layerprobe/depth@1"
SUBLAYER_KINDS = ("attention", "mlp")


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
