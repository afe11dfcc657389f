"""Which runs belong together, and in what order: training steps, one model, one depth.

A run's step is read from the revision its results record (`step-1000`, `step_2000`, `step3000`,
`checkpoint-4000`, `ckpt-5000`, `iter-6000`; case-insensitive), else from the name of the checkpoint's
directory (a Trainer's `checkpoint-N`). Runs are ordered by step when every run has one; otherwise, or
with `--order given`, as given. Runs are of one model when they share the model id, or when their
checkpoints are sibling directories of one training run (`run/checkpoint-1000`, `run/checkpoint-2000`).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import PurePath

from layerprobe.core import LayerprobeError
from layerprobe.results import ModelInfo
from layerprobe.review.runs import RunResults

# step-1000, step_1000, step1000, checkpoint-1000, ckpt-1000, iter-1000 (also global_step1000), any case.
STEP_PATTERN = re.compile(r"(?<![A-Za-z])(?:step|checkpoint|ckpt|iter)[-_]?(\d+)(?!\d)", re.IGNORECASE)


@dataclass(frozen=True)
class Step:
    """A run's training step and where it was read (`revision` or `directory`), or neither."""

    value: int | None
    source: str | None


def parse_step(text: str | None) -> int | None:
    """The step a revision or a directory name carries (the last one when several), else None."""
    if not text:
        return None
    found = STEP_PATTERN.findall(text)
    return int(found[-1]) if found else None


def checkpoint_location(model: ModelInfo) -> str:
    """Where the checkpoint was read from: its local path when the id is a display name, else the id."""
    return model.path or model.id


def run_step(model: ModelInfo) -> Step:
    """The step of a run: from the revision, else from the checkpoint directory's name."""
    from_revision = parse_step(model.revision)
    if from_revision is not None:
        return Step(from_revision, "revision")
    from_directory = parse_step(PurePath(os.path.normpath(checkpoint_location(model))).name)
    return Step(from_directory, "directory" if from_directory is not None else None)


def order_runs(runs: list[RunResults], order: str) -> tuple[list[RunResults], str, str | None]:
    """The runs in order, the order used ("step" or "given") and why the given order was kept, if it was asked for.

    Sorting is stable: runs of the same step keep their given order.
    """
    if order == "given":
        return list(runs), "given", None
    missing = [run.name for run in runs if run_step(run.model).value is None]
    if missing:
        shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
        return list(runs), "given", f"kept the given order: no training step in the revision or checkpoint of {shown}"
    return sorted(runs, key=lambda run: run_step(run.model).value or 0), "step", None


def sibling_checkpoints(models: list[ModelInfo]) -> bool:
    """Whether the checkpoints are directories of one parent, each named with a step (`run/checkpoint-N`)."""
    locations = [PurePath(os.path.normpath(checkpoint_location(m))) for m in models]
    return len({loc.parent for loc in locations}) == 1 and all(parse_step(loc.name) is not None for loc in locations)


def check_one_model(runs: list[RunResults], allow_mixed: bool) -> bool:
    """Refuse runs of different models unless `allow_mixed`; return whether they are mixed.

    Raises:
        LayerprobeError: the runs measured different models and `allow_mixed` is off.
    """
    models = [run.model for run in runs]
    if len({m.id for m in models}) == 1 or sibling_checkpoints(models):
        return False
    if allow_mixed:
        return True
    ids = list(dict.fromkeys(m.id for m in models))
    shown = ", ".join(ids[:3]) + (f" and {len(ids) - 3} more" if len(ids) > 3 else "")
    raise LayerprobeError(
        f"The runs measured different models ({shown}): track and report follow one model's checkpoints.",
        hint="Pass runs of one model id, or sibling checkpoint directories (run/checkpoint-N); "
        "--allow-mixed puts them side by side anyway.",
    )


def check_depths(runs: list[RunResults], align: str) -> None:
    """Refuse runs of different block counts unless `align` is "relative".

    Raises:
        LayerprobeError: the runs' models have different numbers of blocks and `align` is "block".
    """
    counts = {run.num_layers for run in runs}
    if len(counts) > 1 and align != "relative":
        shown = ", ".join(f"L = {run.num_layers} in {run.name}" for run in runs[:4])
        raise LayerprobeError(
            f"The runs have different numbers of blocks ({shown}{', …' if len(runs) > 4 else ''}).",
            hint="Pass --align relative to place each run's blocks at relative depth (l + 0.5) / L.",
        )
