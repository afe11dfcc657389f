"""What `--resume` reuses, said in one line: a finished result, the intact records, the damaged ones.

A resumed run reports how much it took over from the run before (evaluations and, for the shared
engine, journaled batches) and how many damaged records it dropped to compute them again. `--resume`
in an `--out` whose run already finished reuses that prune_drop.json as it is, once its settings and
model block show it is the result of this very run; nothing is evaluated again.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import TYPE_CHECKING

from layerprobe.core import ResultError
from layerprobe.results import PruneDropResult, library_versions, load_result

if TYPE_CHECKING:
    from pathlib import Path

    from layerprobe.prune.assemble import PruneSettings
    from layerprobe.results import ModelInfo

VERSIONED = ("torch", "transformers", "lm_eval")  # the libraries whose version is part of a run's identity


def finished_result(path: Path, settings: PruneSettings, info: ModelInfo) -> tuple[PruneDropResult | None, str]:
    """The finished result at `path` if it is this run's (same settings, model and library versions).

    Returns the result (None when it cannot be reused) and the line that says what happened.
    """
    try:
        result = load_result(path)
    except ResultError as exc:
        return None, f"--resume: {path} is not readable ({exc.message}); computing the run afresh."
    if not isinstance(result, PruneDropResult):
        return None, f"--resume: {path} is not a prune-drop result; computing the run afresh."
    differing = [
        k
        for k in sorted(set(settings) | set(result.settings))
        if _json(settings.get(k)) != _json(result.settings.get(k))
    ]
    theirs, ours = asdict(result.model), asdict(info)
    differing += [f"model.{k}" for k in sorted(ours) if _json(theirs.get(k)) != _json(ours.get(k))]
    versions = library_versions()
    differing += [f"{name} version" for name in VERSIONED if result.run.versions.get(name) != versions.get(name)]
    if differing:
        return None, (
            f"--resume: {path} is the finished result of a different run ({', '.join(differing)} differ); "
            "computing this run afresh, it will be replaced."
        )
    evaluations = len(result.tasks) * (len(settings["layers"]) + 1)
    return result, (
        f"--resume: {path} is already this run's finished result; reused as it is "
        f"({evaluations} evaluations, nothing recomputed)."
    )


def resumed_line(reused: int, total: int, batches: int, damaged: int, where: Path) -> str:
    """One line on what a resumed run takes over, and how many damaged records it computes again."""
    if not reused and not batches and not damaged:
        return f"--resume: no unfinished run in {where}; computing all {total} evaluations."
    parts = [f"--resume: reusing {reused} of {total} evaluations from {where}"]
    if batches:
        parts.append(f"and {batches} batch(es) of journaled answers")
    text = " ".join(parts) + f"; computing {total - reused}"
    if damaged:
        text += f"; {damaged} damaged record(s) of the resume state dropped and computed again"
    return text + "."


def _json(value: object) -> object:
    """`value` as it reads back from JSON (tuples become lists, 2 stays 2, 2.0 stays 2.0)."""
    return json.loads(json.dumps(value))
