"""The `run` block every result carries (when, how long, with which library versions), and JSON-equal values."""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone
from typing import Any

from layerprobe.results.kinds import RunInfo


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
