"""The resumable record of a prune-drop run: every finished (task, variant) score, on disk at once.

A prune-drop over a 7B model is hours of GPU time; a crash or Ctrl-C must not cost what was done.
Each finished evaluation is written (atomically) to `prune_drop.partial.json`. `--resume` reads it back
and recomputes nothing already there, but only when the run is the same experiment: same model and
commit, dtype, few-shot, limit, seed and task sources. Mixing scores of two experiments would give a
ΔP that measures nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from layerprobe.errors import ResultError
from layerprobe.results import read_json, write_json

PARTIAL_NAME = "prune_drop.partial.json"
PARTIAL_SCHEMA = "layerprobe/prune-drop-partial@1"
BASELINE = "baseline"


def variant_key(layer: int | None) -> str:
    """The JSON key of a variant: "baseline" or the removed block's index."""
    return BASELINE if layer is None else str(layer)


class PruneState:
    """Scores by task and variant, with the fingerprint of the experiment that produced them."""

    def __init__(
        self, path: Path, fingerprint: dict[str, Any], done: dict[str, dict[str, dict[str, Any]]] | None = None
    ) -> None:
        self.path = path
        self.fingerprint = fingerprint
        self.done: dict[str, dict[str, dict[str, Any]]] = done or {}

    @classmethod
    def open(cls, out_dir: Path, fingerprint: dict[str, Any], resume: bool) -> PruneState:
        """A fresh state, or (with `resume`) the one on disk after checking it is the same experiment."""
        path = out_dir / PARTIAL_NAME
        if not path.exists():
            return cls(path, fingerprint)
        if not resume:  # never overwrite hours of finished evaluations by accident
            raise ResultError(
                f"{path} holds an unfinished prune-drop run.",
                hint="Add --resume to continue it, or delete that file (or use another --out) to start over.",
            )
        data = read_json(path)
        if data.get("schema") != PARTIAL_SCHEMA:
            raise ResultError(f"{path} is not a prune-drop progress file.")
        stored = data.get("fingerprint", {})
        differing = sorted(k for k in set(stored) | set(fingerprint) if stored.get(k) != fingerprint.get(k))
        if differing:
            details = "; ".join(f"{k}: was {stored.get(k)!r}, now {fingerprint.get(k)!r}" for k in differing)
            raise ResultError(
                f"--resume refuses to mix results of a different run ({details}).",
                hint=f"Use another --out directory, or delete {path} to start over.",
            )
        return cls(path, fingerprint, data.get("done", {}))

    def has(self, task: str, layer: int | None) -> bool:
        return variant_key(layer) in self.done.get(task, {})

    def get(self, task: str, layer: int | None) -> dict[str, Any]:
        return self.done[task][variant_key(layer)]

    def record(self, task: str, layer: int | None, scores: dict[str, Any]) -> None:
        """Keep one finished evaluation and write the whole state to disk before returning."""
        self.done.setdefault(task, {})[variant_key(layer)] = scores
        write_json(self.path, {"schema": PARTIAL_SCHEMA, "fingerprint": self.fingerprint, "done": self.done})

    def variants(self, task: str) -> list[int | None]:
        """The variants recorded for `task` (None: the baseline)."""
        return [None if key == BASELINE else int(key) for key in self.done.get(task, {})]

    def forget(self, task: str, layer: int | None) -> None:
        """Drop one recorded evaluation so that it is evaluated again (its per-document rows are lost)."""
        self.done.get(task, {}).pop(variant_key(layer), None)

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)
