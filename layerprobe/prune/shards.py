"""prune-drop split over independent jobs: `--shard i/N` writes a shard file, `layerprobe merge` joins them.

Each job of a Slurm array (or k8s indexed job) scores its share of the variants into its own --out as
prune_drop.shard.json: the finished evaluations plus everything needed to rebuild the result (model
provenance, settings, the experiment's fingerprint). `join_shards` refuses shards of different
experiments and sets of variants that are not exactly the whole, then assembles the prune_drop.json an
unsharded run writes (identical apart from the `run` block: timing and host).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from layerprobe.core import ResultError
from layerprobe.prune.state import variant_key
from layerprobe.results import ModelInfo, PruneShard, RunDir, RunInfo, read_json, write_json

if TYPE_CHECKING:
    from layerprobe.core import Share


def write_shard(
    out_dir: Path,
    shard: Share,
    fingerprint: dict[str, Any],
    info: ModelInfo,
    settings: dict[str, Any],
    done: dict[str, dict[str, Any]],
    rows: dict[str, list[dict[str, Any]]],
    run: RunInfo,
    angular: Path | None,
) -> Path:
    """Write this shard's evaluations (only its own variants) and what merge needs to check and assemble."""
    keys = [variant_key(v) for v in shard.of([None, *settings["layers"]])]
    record = PruneShard(
        shard=str(shard),
        fingerprint=fingerprint,
        model=info,
        settings=settings,
        tasks=list(settings["tasks"]),
        layers=list(settings["layers"]),
        variants=keys,
        done={task: {k: done[task][k] for k in keys} for task in settings["tasks"]},
        samples=rows,  # the per-document rows of this shard's variants, for the paired stderrs
        angular=None if angular is None else str(Path(angular).resolve()),
        run=run,
    )
    return write_json(RunDir(out_dir).shard_json, record.to_dict())


def join_shards(paths: list[Path]) -> tuple[dict, ModelInfo, dict, dict, dict, RunInfo, str | None]:
    """(fingerprint, model, settings, done, per-document rows, run, angular path) of the whole run, checked.

    Refuses shards of different runs, a variant in two shards, and a variant in none.
    """
    if not paths:
        raise ResultError("merge needs at least one shard.", hint="layerprobe merge OUT1 OUT2 … --out DIR")
    shards = [(path, _read_shard(path)) for path in paths]
    first_path, first = shards[0]
    for path, data in shards[1:]:
        for part, theirs in data.identity().items():
            ours = first.identity()[part]
            if theirs != ours:
                differing = sorted(k for k in set(theirs) | set(ours) if theirs.get(k) != ours.get(k))
                raise ResultError(
                    f"{path} and {first_path} are shards of different runs ({part}: {', '.join(differing)} differ).",
                    hint="Merge only the shards of one prune-drop command (same model, tasks, layers and options).",
                )
    owner: dict[str, Path] = {}
    for path, data in shards:
        for key in data.variants:
            if key in owner:
                raise ResultError(
                    f"variant {key} is in both {owner[key]} and {path}.",
                    hint="Pass each shard once (shards i/N of one N are disjoint).",
                )
            owner[key] = path
    missing = [key for key in (variant_key(v) for v in [None, *first.layers]) if key not in owner]
    if missing:
        raise ResultError(
            f"the shards lack variant(s) {', '.join(missing)}.",
            hint="Pass every shard of the run (--shard 0/N … N-1/N) once each.",
        )
    done: dict[str, dict[str, Any]] = {task: {} for task in first.tasks}
    rows: dict[str, list[dict[str, Any]]] = {task: [] for task in first.tasks}
    for _, data in shards:
        for task, evaluations in data.done.items():
            done[task].update(evaluations)
            rows[task].extend(data.samples.get(task, []))
    runs = [data.run for _, data in shards]
    run = RunInfo(
        started_at=min(r.started_at for r in runs),
        seconds=sum(r.seconds for r in runs),
        versions=runs[0].versions,
        device=runs[0].device,
    )
    return dict(first.fingerprint), first.model, dict(first.settings), done, rows, run, first.angular


def _read_shard(path: Path) -> PruneShard:
    file = RunDir(path).shard_json if Path(path).is_dir() else Path(path)
    if not file.exists():
        raise ResultError(f"{file} does not exist.", hint="Pass the --out folders of `prune-drop --shard` runs.")
    return PruneShard.from_dict(read_json(file), str(file))
