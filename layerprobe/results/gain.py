"""gain.json: parameters, bytes on disk, peak memory and prefill/decode speed of candidates against an original.

Schema `layerprobe/gain@1` (docs/json-schema.md). `models[0]` is the original; every model carries its
per-round speeds, their medians and its ratios to the original (`ratios`: sizes exact, speeds the median
and 25–75 % spread of per-round ratios).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from layerprobe.results.io import GAIN_SCHEMA, check_schema, read_json
from layerprobe.results.json_types import JSONObject
from layerprobe.results.rundir import GAIN_JSON
from layerprobe.results.validate import Node

SPEEDS = ("prefill_tokens_per_second", "decode_tokens_per_second")


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
            entry.key("parameters").integer(minimum=0)
            entry.key("bytes_on_disk").integer(optional=True, minimum=0)
            for speed in SPEEDS:
                for value in entry.key(speed).items(min_length=1):
                    value.number(finite=True)
                ratio = entry.key("ratios").key(speed)
                ratio.key("median").number(finite=True)
            models.append(entry.obj())
        return cls(settings=node.key("settings").obj(), models=models, run=node.key("run").obj())


def read_gain(path: str | os.PathLike[str]) -> GainResult:
    """Read and validate a gain.json (one line naming file and field on any bad value)."""
    return GainResult.from_dict(read_json(path), str(path))
