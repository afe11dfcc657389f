"""heal.json: what `layerprobe heal` removed, how it stood in for it, and what came back on held-out text.

Schema `layerprobe/heal@1` (docs/json-schema.md). The held-out block holds, per metric (nll, kl,
top1_agreement), each model's mean with its interval, the paired differences to the original, and the
recovery with its bootstrap interval (or `defined: false` and the reason). Read back field by field
(validate.py), so `report`, `track` and `compare` can rely on every number they use.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from typing import Any

import layerprobe.results.validate as v
from layerprobe.results.io import HEAL_SCHEMA, check_schema, read_json
from layerprobe.results.json_types import JSONObject
from layerprobe.results.provenance import ModelInfo, RunInfo
from layerprobe.results.rundir import HEAL_JSON
from layerprobe.results.validate import Node

HEAL_MODELS = ("original", "pruned", "healed")
HEAL_METRICS = ("nll", "kl", "top1_agreement")
# The range of each metric's value per model (its differences between models have none): NLL and KL are
# ≥ 0, top-1 agreement a share in [0, 1].
_RANGES: dict[str, tuple[float | None, float | None]] = {
    "nll": (0.0, None),
    "kl": (0.0, None),
    "top1_agreement": (0.0, 1.0),
}


@dataclass(frozen=True)
class HealResult:
    """One heal run: the model, the removed blocks and their spans, the fits, and the held-out comparison."""

    model: ModelInfo
    method: str
    removed: list[int]
    spans: list[list[int]]
    ridge: float | None
    fits: list[dict[str, Any]]
    data: dict[str, Any]
    metrics: dict[str, dict[str, Any]]
    parameters: dict[str, int]
    checkpoint: str | None
    fit_seconds: float
    run: RunInfo
    lora: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)
    tasks: dict[str, Any] | None = None  # --task: task → {samples, num_fewshot, metrics}

    def recovery(self, metric: str) -> float | None:
        """The recovery of `metric` (None where not defined)."""
        value = self.metrics[metric]["recovery"]["value"]
        return None if value is None else float(value)

    def to_dict(self) -> dict[str, object]:
        return {
            "schema": HEAL_SCHEMA,
            "model": asdict(self.model),
            "method": self.method,
            "removed": self.removed,
            "spans": self.spans,
            "ridge": self.ridge,
            "fits": self.fits,
            "lora": self.lora,
            "data": self.data,
            "held_out": {"metrics": self.metrics, "recovery_method": "paired_bootstrap"},
            "tasks": self.tasks,
            "parameters": self.parameters,
            "checkpoint": self.checkpoint,
            "fit_seconds": self.fit_seconds,
            "notes": self.notes,
            "run": asdict(self.run),
        }

    @classmethod
    def from_dict(cls, data: JSONObject | Node, source: str = HEAL_JSON) -> HealResult:
        node = Node.of(data, source)
        check_schema(node, HEAL_SCHEMA)
        metrics: dict[str, dict[str, Any]] = {}
        held = node.key("held_out").key("metrics")
        for metric in HEAL_METRICS:
            entry = held.key(metric)
            found: dict[str, Any] = {"higher_is_better": entry.key("higher_is_better").flag()}
            for name in (*HEAL_MODELS, "pruned_delta", "healed_delta", "healed_vs_pruned"):
                found[name] = _estimate(entry.key(name), *(_RANGES[metric] if name in HEAL_MODELS else (None, None)))
            rec = entry.key("recovery")
            value = rec.key("value").number(optional=True, finite=True)
            defined = rec.key("defined").flag()
            if defined != (value is not None):
                rec.key("defined").fail(f"{str(value is not None).lower()} (recovery.value is {value})")
            found["recovery"] = {
                "value": value,
                "ci95": v.interval(rec.key("ci95"), estimate=value),
                "defined": defined,
                "reason": rec.key("reason").text(optional=True),
            }
            metrics[metric] = found
        lora, tasks = node.key("lora"), node.key("tasks")
        return cls(
            model=ModelInfo.from_dict(node.key("model")),
            method=node.key("method").text(),
            removed=[item.integer(minimum=0) for item in node.key("removed").items(min_length=1)],
            spans=[[x.integer(minimum=0) for x in s.items(min_length=2)] for s in node.key("spans").items()],
            ridge=node.key("ridge").number(optional=True, finite=True, low=0.0),
            fits=[f.obj() for f in node.key("fits").items()],
            data=node.key("data").obj(),
            metrics=metrics,
            parameters={k: n.integer(minimum=0) for k, n in node.key("parameters").entries()},
            checkpoint=node.key("checkpoint").text(optional=True),
            fit_seconds=node.key("fit_seconds").number(finite=True, low=0.0),
            run=RunInfo.from_dict(node.key("run")),
            lora=lora.obj() if lora.given else None,
            notes=[n.text() for n in node.key("notes").items()] if node.key("notes").given else [],
            tasks={name: task.obj() for name, task in tasks.entries()} if tasks.given else None,
        )


def _estimate(node: Node, low: float | None, high: float | None) -> dict[str, Any]:
    """A model's mean (in the metric's range) or a paired difference: stderr ≥ 0, an interval holding it."""
    value = node.key("value").number(finite=True, low=low, high=high)
    return {
        "value": value,
        "stderr": node.key("stderr").number(optional=True, low=0.0),
        "method": node.key("method").text(optional=True),
        "ci95": v.interval(node.key("ci95"), low, high, estimate=value),
    }


def read_heal(path: str | os.PathLike[str]) -> HealResult:
    """Read and validate a heal.json (one line naming file and field on any bad value)."""
    return HealResult.from_dict(read_json(path), str(path))
