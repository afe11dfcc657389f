"""The `model` and `run` blocks every result carries: which checkpoint, and when, how long, with what.

`ModelInfo` is enough to reproduce a run and to refuse mixing runs of different checkpoints; `RunInfo`
records when and with which library versions a result was produced (`RunTimer` fills it in).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from importlib.metadata import PackageNotFoundError, version

import layerprobe.results.validate as v
from layerprobe.core import current_invocation
from layerprobe.results.json_types import JSONObject, Record
from layerprobe.results.validate import Node

# What each block must hold, field by field (validate.py's readers). A field a newer layerprobe adds is
# one line here; optional fields keep older files readable.
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
    "weights_fingerprint": v.text(optional=True),
    "side": v.text(optional=True),
    "stack_role": v.text(optional=True),
    "stream": v.text(optional=True),
    "skipped_blocks": v.integer_list(optional=True),
}
RUN_FIELDS: dict[str, v.Kind] = {
    "started_at": v.text(optional=True),
    "seconds": lambda node: node.number(optional=True, low=0.0),
    "versions": v.string_map(optional=True),
    "device": v.text(optional=True),
    "prefix_reuse": v.text(optional=True),
    "command": v.text_list(optional=True),
    "cwd": v.text(optional=True),
    "inputs": v.string_map(optional=True),
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
    model_args: JSONObject = field(default_factory=dict)  # extra from_pretrained keywords (--model-args)
    # sha256 of the weight files' layouts, sizes and sampled bytes (model/fingerprint.py); None in older files.
    weights_fingerprint: str | None = None
    # Which stack of an encoder-decoder `layer_path` is: "encoder" or "decoder"; None for one-stack models.
    side: str | None = None
    # Which tower the measured stack belongs to: "text" or "vision" (model/towers.py); None in older files.
    stack_role: str | None = None
    # Which of several streams per position was measured (Gemma-3n's AltUp, model/streams.py); None: one stream.
    stream: str | None = None
    # Blocks the measured pass skips (mllama's image-only blocks, text-only); None where every block runs.
    skipped_blocks: list[int] | None = None

    @property
    def label(self) -> str:
        """The model's name for titles and summaries, marked when its weights were quantized."""
        return f"{self.id} ({self.quantization})" if self.quantization else self.id

    @property
    def heading(self) -> str:
        """The label for a summary's heading; an encoder-decoder's also names the stack measured (path, side)."""
        return f"{self.label} · {self.side} stack {self.layer_path}" if self.side else self.label

    @classmethod
    def from_dict(cls, data: JSONObject | Node, source: str = "model") -> ModelInfo:
        values = v.read_fields(Node.of(data, source), MODEL_FIELDS)
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
    # `layerprobe ARGS…` that re-runs this result (`layerprobe rerun`), and the folder it ran in; None for a
    # library call and in results written before it was recorded.
    command: list[str] | None = None
    cwd: str | None = None
    inputs: dict[str, str] = field(default_factory=dict)  # local files the command read → content digest

    @classmethod
    def from_dict(cls, data: JSONObject | Node, source: str = "run") -> RunInfo:
        return cls(**v.read_fields(Node.of(data, source), RUN_FIELDS))


def jsonable(value: Record) -> JSONObject:
    """The mapping as it reads back from JSON (keys become strings), so a fingerprint compares equal."""
    loaded: JSONObject = json.loads(json.dumps(value, default=str))
    return loaded


def library_versions() -> dict[str, str]:
    """Versions of everything that can change a number."""
    out = {}
    for name in ("layerprobe", "torch", "transformers", "datasets", "lm_eval"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            continue
    return out


class RunTimer:
    """The `run` block of a result: started now, finished (seconds, versions, device) by `finish`."""

    def __init__(self) -> None:
        self.started = datetime.now(timezone.utc)
        self._clock = time.perf_counter()

    def finish(self, device: str) -> RunInfo:
        invocation = current_invocation()
        return RunInfo(
            started_at=self.started.isoformat(timespec="seconds"),
            seconds=time.perf_counter() - self._clock,
            versions=library_versions(),
            device=device,
            command=list(invocation.argv) if invocation else None,
            cwd=invocation.cwd if invocation else None,
            inputs=dict(invocation.inputs) if invocation else {},
        )
