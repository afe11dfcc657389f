"""A run directory's results, read once and checked: what `track` and `report` start from.

A run directory is the `--out` of the measuring commands. It holds any of angular.json, prune_drop.json,
depth.json and prune_curve.json (`results.REVIEWED_FILES`), all of one checkpoint. Every way a directory
can be unusable (missing, a file, empty, a file of the wrong kind, results of two checkpoints) is one
`ResultError` naming the directory.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from layerprobe.core import ResultError
from layerprobe.results import (
    REVIEWED_FILES,
    AngularResult,
    DepthResult,
    HealResult,
    ModelInfo,
    PruneCurveResult,
    PruneDropResult,
    RunDir,
    load_result,
)

T = TypeVar("T")
AnyResult = AngularResult | PruneDropResult | DepthResult | PruneCurveResult | HealResult
KINDS = {
    "angular": AngularResult,
    "prune_drop": PruneDropResult,
    "depth": DepthResult,
    "prune_curve": PruneCurveResult,
    "heal": HealResult,
}


@dataclass(frozen=True)
class RunResults:
    """The results one run directory holds (None for a kind it does not), and the files they came from."""

    directory: Path
    files: dict[str, Path]
    angular: AngularResult | None = None
    prune_drop: PruneDropResult | None = None
    depth: DepthResult | None = None
    prune_curve: PruneCurveResult | None = None
    heal: HealResult | None = None

    @property
    def model(self) -> ModelInfo:
        """The checkpoint every result of the directory measured (`read_run` checked they agree)."""
        for kind in KINDS:
            result = getattr(self, kind)
            if result is not None:
                model: ModelInfo = result.model
                return model
        raise AssertionError("a RunResults holds at least one result")

    @property
    def num_layers(self) -> int:
        return self.model.num_layers

    @property
    def name(self) -> str:
        """The directory's name, for labels and messages."""
        return self.directory.name or str(self.directory)


def read_run(directory: str | Path) -> RunResults:
    """Read every result file of a run directory, validated, and check they measured one checkpoint.

    Raises:
        ResultError: the directory does not exist, is a file, holds no result, holds a file of the wrong
            kind under a result's name, or holds results of two checkpoints.
    """
    path = Path(directory)
    if not path.exists():
        raise ResultError(
            f"Run directory {path} does not exist.",
            hint="Pass the --out directory of layerprobe angular, prune-drop, depth or prune-curve.",
        )
    if not path.is_dir():
        raise ResultError(f"{path} is a file, not a run directory.", hint="Pass the directory that holds it.")
    files = RunDir(path).present_results()
    if not files:
        names = ", ".join(REVIEWED_FILES.values())
        raise ResultError(
            f"{path} holds no layerprobe result (none of {names}).",
            hint="Pass the --out directory of layerprobe angular, prune-drop, depth or prune-curve.",
        )
    results = {kind: load_result(file) for kind, file in files.items()}
    for kind, result in results.items():
        if not isinstance(result, KINDS[kind]):
            raise ResultError(
                f"{files[kind]} is not a {kind.replace('_', '-')} result, though it has that file's name."
            )
    run = RunResults(
        directory=path,
        files=files,
        angular=_of(results, "angular", AngularResult),
        prune_drop=_of(results, "prune_drop", PruneDropResult),
        depth=_of(results, "depth", DepthResult),
        prune_curve=_of(results, "prune_curve", PruneCurveResult),
        heal=_of(results, "heal", HealResult),
    )
    check_one_checkpoint(run)
    return run


def _of(results: dict[str, AnyResult], kind: str, cls: type[T]) -> T | None:
    result = results.get(kind)
    return result if isinstance(result, cls) else None


def check_one_checkpoint(run: RunResults) -> None:
    """Refuse a directory whose results measured different checkpoints (model, revision or number of blocks)."""
    seen: dict[tuple[str, str | None, int], str] = {}
    for kind, file in run.files.items():
        model = getattr(run, kind).model
        seen.setdefault((model.id, model.revision, model.num_layers), file.name)
    if len(seen) > 1:
        described = "; ".join(
            f"{name}: {model_id}" + (f"@{revision}" if revision else "") + f" (L = {layers})"
            for (model_id, revision, layers), name in seen.items()
        )
        raise ResultError(
            f"{run.directory} holds results of different checkpoints ({described}).",
            hint="Keep one checkpoint's results per run directory (each measuring command's --out).",
        )
