"""gain.json: parameters, bytes on disk, peak memory and prefill/decode speed of candidates against an original.

Schema `layerprobe/gain@1` (docs/json-schema.md). `models[0]` is the original; every model carries its
per-round speeds, their medians and its ratios to the original (`ratios`: sizes exact, speeds the median
and 25–75 % spread of per-round ratios).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import layerprobe.results.validate as v
from layerprobe.results.io import GAIN_SCHEMA, check_schema, read_json
from layerprobe.results.json_types import JSONObject
from layerprobe.results.rundir import GAIN_JSON
from layerprobe.results.validate import Node

SPEEDS = ("prefill_tokens_per_second", "decode_tokens_per_second")
SIZES = ("parameters", "bytes_on_disk", "peak_memory_bytes")  # exact ratios: null where not measured


@dataclass(frozen=True)
class GainResult:
    """The measured models (the original first) and how they were measured."""

    settings: dict[str, Any]
    models: list[dict[str, Any]]
    run: dict[str, Any]

    def to_dict(self) -> dict[str, object]:
        return {"schema": GAIN_SCHEMA, "settings": self.settings, "models": self.models, "run": self.run}

    @classmethod
    def from_dict(cls, data: JSONObject | Node, source: str = GAIN_JSON) -> GainResult:
        node = Node.of(data, source)
        check_schema(node, GAIN_SCHEMA)
        models = []
        for entry in node.key("models").items(min_length=2):
            entry.key("model").text()
            entry.key("parameters").integer(minimum=1)
            for size in SIZES[1:]:
                entry.key(size).integer(optional=True, minimum=1)
            ratios = entry.key("ratios")
            for size in SIZES:
                _ratio(ratios.key(size), optional=size != "parameters")
            for speed in SPEEDS:
                for value in entry.key(speed).items(min_length=1):
                    _ratio(value)  # a speed in tokens/s: > 0 and finite like a ratio
                ratio = ratios.key(speed)
                median = _ratio(ratio.key("median"))
                spread = v.interval(ratio.key("spread"), estimate=median)
                if spread is None or spread[0] <= 0:
                    ratio.key("spread").fail("the 25–75 % spread [low, high] of positive ratios")
            models.append(entry.obj())
        return cls(settings=node.key("settings").obj(), models=models, run=node.key("run").obj())


def _ratio(node: Node, optional: bool = False) -> float | None:
    """A ratio (or a speed): finite and > 0, or null where `optional`."""
    value = node.number(optional=optional, finite=True, low=0.0)
    if value == 0:
        node.fail("a finite number > 0", "got 0")
    return value


def read_gain(path: str | os.PathLike[str]) -> GainResult:
    """Read and validate a gain.json (one line naming file and field on any bad value)."""
    return GainResult.from_dict(read_json(path), str(path))
