"""The provenance block every result carries: which model, which stack, which library versions."""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone
from typing import Any

from layerprobe.model.load import LoadedModel
from layerprobe.model.stack import LayerStack
from layerprobe.results.kinds import ModelInfo, RunInfo


def model_info(loaded: LoadedModel, stack: LayerStack) -> ModelInfo:
    """The provenance block shared by every result."""
    return ModelInfo(
        id=loaded.spec.display_name,
        revision=loaded.spec.revision,
        commit=loaded.commit,
        architecture=loaded.architecture,
        model_type=loaded.model_type,
        kind=loaded.kind,
        dtype=loaded.dtype,
        num_layers=stack.num_layers,
        layer_path=stack.path,
        block_class=stack.block_class,
        quantization=loaded.quantization,
        attn_implementation=loaded.attn_implementation,
        model_args=jsonable(loaded.spec.model_args),
        path=loaded.spec.model if loaded.spec.display_name != loaded.spec.model else None,
    )


def jsonable(value: Any) -> Any:
    """The value as it reads back from JSON (mapping keys become strings), so a fingerprint compares equal."""
    return json.loads(json.dumps(value, default=str))


def library_versions() -> dict[str, str]:
    """Versions of everything that can change a number."""
    from importlib.metadata import PackageNotFoundError, version

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
        return RunInfo(
            started_at=self.started.isoformat(timespec="seconds"),
            seconds=time.perf_counter() - self._clock,
            versions=library_versions(),
            device=device,
        )
