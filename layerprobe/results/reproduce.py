"""Whether a re-run reproduced a result: every recorded value compared, what only says when or how fast left out.

`layerprobe rerun` runs a result's recorded command again and hands both files here. Values are
compared exactly (a float must be the same float: on one machine with the same libraries a run is
deterministic), except the `run` block (start time, seconds, versions, the command itself), the
throughput field `tokens_per_second` and heal's `fit_seconds`, which differ between any two runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from layerprobe.results.json_types import JSONObject, JSONValue

NOT_REPRODUCIBLE_KEYS = frozenset(
    {"run", "tokens_per_second", "fit_seconds"}
)  # top-level members that say when / how fast


@dataclass(frozen=True)
class Difference:
    """One value that differs: where (a JSON path), what was recorded and what the re-run gave."""

    path: str
    recorded: JSONValue
    rerun: JSONValue

    @property
    def magnitude(self) -> float:
        """|recorded − rerun| for two numbers (inf when either is not one, or only one is NaN)."""
        a, b = self.recorded, self.rerun
        if isinstance(a, int | float) and isinstance(b, int | float) and not isinstance(a, bool | str):
            if math.isnan(a) or math.isnan(b):
                return math.inf
            return abs(float(a) - float(b))
        return math.inf


def _same(a: JSONValue, b: JSONValue) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True  # a failed measurement recorded again as failed
    return type(a) is type(b) and a == b


def _walk(recorded: JSONValue, rerun: JSONValue, path: str, found: list[Difference]) -> None:
    if isinstance(recorded, dict) and isinstance(rerun, dict):
        for key in sorted(set(recorded) | set(rerun)):
            where = f"{path}.{key}" if path else key
            if key not in recorded or key not in rerun:
                found.append(Difference(where, recorded.get(key), rerun.get(key)))
            else:
                _walk(recorded[key], rerun[key], where, found)
    elif isinstance(recorded, list) and isinstance(rerun, list) and len(recorded) == len(rerun):
        for index, (a, b) in enumerate(zip(recorded, rerun, strict=True)):
            _walk(a, b, f"{path}[{index}]", found)
    elif not _same(recorded, rerun):
        found.append(Difference(path, recorded, rerun))


def differences(recorded: JSONObject, rerun: JSONObject) -> list[Difference]:
    """Every value of `recorded` that `rerun` does not reproduce exactly (timing and the run block aside)."""
    found: list[Difference] = []
    kept = {k: v for k, v in recorded.items() if k not in NOT_REPRODUCIBLE_KEYS}
    again = {k: v for k, v in rerun.items() if k not in NOT_REPRODUCIBLE_KEYS}
    _walk(kept, again, "", found)
    return found
