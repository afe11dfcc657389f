"""prune-drop split over independent jobs: `--shard i/N` writes a shard file, `layerprobe merge` joins them.

Each job of a Slurm array (or k8s indexed job) scores its share of the variants into its own --out as
prune_drop.shard.json: the finished evaluations plus everything needed to rebuild the result (model
provenance, settings, the experiment's fingerprint). `join_shards` checks each shard against itself
(`shard_checks.py`), then refuses shards of different experiments and sets of variants that are not
exactly the whole; `merge_shards` then assembles the
prune_drop.json an unsharded run writes (identical apart from the `run` block: timing and host).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from layerprobe.core import ResultError
from layerprobe.prune.agreement import AngularSource, load_angular_for
from layerprobe.prune.assemble import PruneSettings, assemble_result
from layerprobe.prune.samples import SampleRow
from layerprobe.prune.sequential import longer_baseline
from layerprobe.prune.shard_checks import Document, check_shard, documents_agree
from layerprobe.prune.state import BASELINE_KEY, PruneState, Recorded, variant_key
from layerprobe.results import ModelInfo, PruneDropResult, PruneShard, RunDir, RunInfo, read_json, write_json

if TYPE_CHECKING:
    from layerprobe.core import Share


@dataclass(frozen=True)
class JoinedShards:
    """The shards of one run, checked and joined: everything `merge_shards` assembles the result from.

    Attributes:
        fingerprint: The experiment's fingerprint (`state.fingerprint`), the same in every shard.
        info: The model's provenance.
        settings: The run's settings (`assemble.prune_settings`).
        done: Every (task, variant) evaluation of the run, in progress-file form.
        rows: Task → the per-document rows of every variant.
        run: Timing and host: the earliest start, the summed seconds, the first shard's versions and device.
        angular: The angular.json the shards compared with (resolved), or None.
    """

    fingerprint: dict[str, object]
    info: ModelInfo
    settings: PruneSettings
    done: Recorded
    rows: dict[str, list[SampleRow]]
    run: RunInfo
    angular: str | None


class JoinedRows:
    """Per-document rows held in memory (joined shards), read like a `SampleLog`."""

    def __init__(self, rows: dict[str, list[SampleRow]]) -> None:
        """Rows by task, each row naming its variant."""
        self.rows = rows

    def read(self, task: str) -> dict[int | None, list[SampleRow]]:
        """The rows of `task`, by variant (None: the baseline)."""
        by_variant: dict[int | None, list[SampleRow]] = {}
        for row in self.rows.get(task, []):
            by_variant.setdefault(row["variant"], []).append(row)
        return by_variant


def write_shard(
    out_dir: Path,
    shard: Share,
    fingerprint: dict[str, object],
    info: ModelInfo,
    settings: PruneSettings,
    done: Recorded,
    rows: dict[str, list[SampleRow]],
    run: RunInfo,
    angular: Path | None,
    variants: list[int | None] | None = None,
) -> Path:
    """Write this shard's evaluations (only its own `variants`, by default its share) and what merge needs."""
    keys = [variant_key(v) for v in (shard.of([None, *settings["layers"]]) if variants is None else variants)]
    record = PruneShard(
        shard=str(shard),
        fingerprint=dict(fingerprint),
        model=info,
        settings=dict(settings),
        tasks=list(settings["tasks"]),
        layers=list(settings["layers"]),
        variants=keys,
        done={task: {k: done[task][k] for k in keys} for task in settings["tasks"]},
        samples=rows,  # the per-document rows of this shard's variants, for the paired stderrs
        angular=None if angular is None else str(Path(angular).resolve()),
        run=run,
    )
    return write_json(RunDir(out_dir).shard_json, record.to_dict())


def merge_shards(paths: list[Path], out_dir: Path) -> PruneDropResult:
    """Join the shards of one `--shard i/N` run into `out_dir`/prune_drop.json, as one unsharded run writes it."""
    joined = join_shards(paths)
    angular = None
    if joined.angular is not None:
        path = Path(joined.angular)
        angular = AngularSource(path, load_angular_for(path, joined.info.num_layers))
    state = PruneState(Path(out_dir) / "unused", joined.fingerprint, joined.done)
    result = assemble_result(joined.info, joined.settings, state, joined.run, JoinedRows(joined.rows), angular)
    write_json(RunDir(out_dir).prune_drop_json, result.to_dict())
    return result


def join_shards(paths: list[Path]) -> JoinedShards:
    """The whole run from its shards, checked: refuses shards of different runs, a variant in two, a variant in none."""
    if not paths:
        raise ResultError("merge needs at least one shard.", hint="layerprobe merge OUT1 OUT2 … --out DIR")
    shards = [(path, _read_shard(path)) for path in paths]
    documents = {path: check_shard(_shard_file(path), data) for path, data in shards}  # each against itself
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
    sequential = "precision" in first.settings  # every shard scored a baseline: the longest is kept
    owner: dict[str, Path] = {}
    for path, data in shards:
        for key in data.variants:
            if key in owner and not (sequential and key == BASELINE_KEY):
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
    by_variant: dict[str, dict[str, tuple[Path, set[Document]]]] = {task: {} for task in first.tasks}
    for path, _ in shards:
        for task, variants in documents[path].items():
            by_variant[task].update({key: (_shard_file(path), docs) for key, docs in variants.items()})
    documents_agree(by_variant, sequential)
    done: Recorded = {task: {} for task in first.tasks}
    rows: dict[str, list[SampleRow]] = {task: [] for task in first.tasks}
    for _, data in shards:
        for task, evaluations in data.done.items():
            found, task_rows = evaluations, data.samples.get(task, [])
            if sequential:
                found, task_rows = longer_baseline(done[task], found, task_rows)
                if BASELINE_KEY in found:  # theirs replaces ours: so do its rows
                    rows[task] = [row for row in rows[task] if row["variant"] is not None]
            done[task].update(found)
            rows[task].extend(task_rows)
    runs = [data.run for _, data in shards]
    run = RunInfo(
        started_at=min(r.started_at for r in runs),
        seconds=sum(r.seconds for r in runs),
        versions=runs[0].versions,
        device=runs[0].device,
    )
    settings: PruneSettings = first.settings  # type: ignore[assignment]  # validated on read
    return JoinedShards(dict(first.fingerprint), first.model, settings, done, rows, run, first.angular)


def _read_shard(path: Path) -> PruneShard:
    """A shard file (given the file or its --out folder), read typed and refused unless it is a shard."""
    file = _shard_file(path)
    if not file.exists():
        raise ResultError(f"{file} does not exist.", hint="Pass the --out folders of `prune-drop --shard` runs.")
    return PruneShard.from_dict(read_json(file), str(file))


def _shard_file(path: Path) -> Path:
    """The shard file a merge argument names: the file itself, or prune_drop.shard.json in its --out folder."""
    return RunDir(path).shard_json if Path(path).is_dir() else Path(path)
