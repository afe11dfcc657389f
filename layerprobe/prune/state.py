"""The resumable record of a prune-drop run: every finished (task, variant) score, on disk at once.

A prune-drop over a 7B model is hours of GPU time; a crash or Ctrl-C must not cost what was done.
Each finished evaluation is written (atomically) to `prune_drop.partial.json`. `--resume` reads it back
and recomputes nothing already there, but only when the run is the same experiment: same model and
commit, dtype, few-shot, limit, seed and task sources. Mixing scores of two experiments would give a
ΔP that measures nothing. Each record carries a checksum of itself and of its per-document rows: a record
damaged on disk is dropped and evaluated again (`damaged` counts them; the run says how many).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, cast

from layerprobe.core import CORPUS_TASK, ResultError, fingerprint_values
from layerprobe.results import (
    PRUNE_DROP_PARTIAL_JSON,
    JSONObject,
    PruneProgress,
    RunDir,
    checksum,
    evaluation_from_dict,
    evaluation_to_dict,
    is_run_file,
    library_versions,
    read_json,
    write_json,
)

if TYPE_CHECKING:
    from layerprobe.core import CorpusSpec, PruneSpec
    from layerprobe.results import Evaluation, ModelInfo

PARTIAL_NAME = PRUNE_DROP_PARTIAL_JSON
BASELINE_KEY = "baseline"  # how the baseline variant (layer None everywhere in code) is spelled on disk
# What the progress file keeps: task → variant key → the evaluation's JSON form (`results.evaluation_to_dict`).
Recorded = dict[str, dict[str, JSONObject]]


def variant_key(layer: int | None) -> str:
    """The JSON key of a variant: "baseline" or the removed block's index."""
    return BASELINE_KEY if layer is None else str(layer)


def fingerprint(spec: PruneSpec, info: ModelInfo) -> dict[str, object]:
    """Everything that changes a score; two runs may share a progress file only if these agree.

    A hub model is pinned by its commit; a local checkpoint (commit None) by a stat digest of its files,
    so a retrained `./ckpt` is never mixed with the old one. Local task folders and SQuAD files are
    digested the same way, and library versions are included: a new lm-eval can change prompts. Which of
    the spec's settings enter it is declared on PruneSpec (`OptionSpec.fingerprint`).
    """
    versions = library_versions()
    return {
        "model": info.id,
        "revision": info.revision,
        "commit": info.commit,
        "files": files_stat_digest(info.id) if info.commit is None and os.path.isdir(info.id) else None,
        "dtype": info.dtype,
        "quantization": info.quantization,
        "attn_implementation": info.attn_implementation,
        "model_args": info.model_args,
        "num_layers": info.num_layers,
        "layer_path": info.layer_path,
        **fingerprint_values(spec, files_stat_digest),
        **(
            {"task_files": {name: files_stat_digest(path) for name, path in spec.task_files}} if spec.task_files else {}
        ),
        "versions": {k: versions.get(k) for k in ("torch", "transformers", "lm_eval")},
        **({"corpus": corpus_settings(spec.corpus)} if CORPUS_TASK in spec.tasks else {}),
    }


def corpus_settings(corpus: CorpusSpec) -> dict[str, object]:
    """The corpus options `--task corpus` was scored on, as recorded in prune_drop.json and fingerprints."""
    return {**corpus.record(), "file": files_stat_digest(corpus.dataset) if corpus.is_local else None}


def files_stat_digest(path: str) -> str:
    """sha256 over the names, sizes and modification times (not the contents) of the files under `path`.

    The files a layerprobe run writes (`results.is_run_file`) are not part of it.

    Reading a 15 GB checkpoint to hash it would cost minutes per run; a retrained or copied-over file
    changes its size or mtime, which is what this is for.
    """
    root = Path(path)
    if not root.exists():  # reported by the loader that needs it, with a proper message
        return f"{os.path.abspath(path)}@missing"
    # A run's own files are left out: an --out inside the checkpoint must not change the checkpoint's digest.
    files = (
        sorted(p for p in root.rglob("*") if p.is_file() and not is_run_file(p.relative_to(root)))
        if root.is_dir()
        else [root]
    )
    digest = hashlib.sha256()
    for file in files:
        stat = file.stat()
        digest.update(
            f"{file.relative_to(root) if root.is_dir() else file.name}|{stat.st_size}|{stat.st_mtime_ns}\n".encode()
        )
    return f"{os.path.abspath(path)}@{digest.hexdigest()[:16]}"


def check_state_paths(out_dir: Path) -> None:
    """Refuse, before any weight loads, an --out where a folder sits at the name of a file a run keeps (or the reverse).

    Raises:
        ResultError: naming the path.
    """
    run = RunDir(out_dir)
    files = [run.partial_json(), run.journal(), run.prune_drop_json, run.shard_json]
    for path in [*files, *run.partial_jsons()]:
        if path.is_dir():
            raise ResultError(
                f"{path} is a directory; prune-drop keeps a file under that name.",
                hint="Move that directory away, or use another --out.",
            )
    for folder in (run.partial_samples(), run.samples_dir):
        if folder.exists() and not folder.is_dir():
            raise ResultError(
                f"{folder} is a file; prune-drop keeps a folder under that name.",
                hint="Move that file away, or use another --out.",
            )


class PruneState:
    """Scores by task and variant, with the fingerprint of the experiment that produced them."""

    def __init__(
        self,
        path: Path,
        fingerprint: dict[str, object],
        done: Recorded | None = None,
        checks: dict[str, dict[str, dict[str, str]]] | None = None,
    ) -> None:
        """A state kept at `path` for the experiment `fingerprint`, holding `done` (nothing: a fresh run)."""
        self.path = path
        self.fingerprint = fingerprint
        self.done: Recorded = done or {}
        self.checks = checks or {}  # task → variant key → {"record": …, "rows": …} (`results.checksum`)
        self.damaged = 0  # records read back damaged and dropped (evaluated again)

    @classmethod
    def open(cls, out_dir: Path, fingerprint: dict[str, object], resume: bool, name: str = PARTIAL_NAME) -> PruneState:
        """A fresh state, or (with `resume`) the one on disk after checking it is the same experiment.

        Each process of a multi-process run keeps its own file (`name`); resuming, a process also takes
        what the other progress files in `out_dir` hold, so a run may resume with another number of ranks.
        """
        path = out_dir / name
        state = cls._read(path, fingerprint, resume) if path.exists() else cls(path, fingerprint)
        for sibling in RunDir(out_dir).partial_jsons():
            if sibling != path:
                state.adopt(cls._read(sibling, fingerprint, resume))
        return state

    @classmethod
    def _read(cls, path: Path, fingerprint: dict[str, object], resume: bool) -> PruneState:
        """The state in the progress file at `path`, refused unless resuming the same experiment.

        A file that is not readable JSON at all (random bytes, cut short) counts as one damaged record
        and starts over; damaged records are dropped (`damaged`).
        """
        if not resume:  # never overwrite hours of finished evaluations by accident
            raise ResultError(
                f"{path} holds an unfinished prune-drop run.",
                hint="Add --resume to continue it, or delete that file (or use another --out) to start over.",
            )
        try:
            data = read_json(path)
        except ResultError:
            state = cls(path, fingerprint)
            state.damaged = 1
            return state
        progress, dropped = PruneProgress.salvage(data, str(path))
        stored = progress.fingerprint
        differing = sorted(k for k in set(stored) | set(fingerprint) if stored.get(k) != fingerprint.get(k))
        if differing:
            details = "; ".join(f"{k}: was {stored.get(k)!r}, now {fingerprint.get(k)!r}" for k in differing)
            raise ResultError(
                f"--resume refuses to mix results of a different run ({details}).",
                hint=f"Use another --out directory, or delete {path} to start over.",
            )
        state = cls(path, fingerprint, progress.done, progress.checks)
        state.damaged = dropped
        return state

    def adopt(self, other: PruneState) -> None:
        """Take the evaluations `other` holds that this state lacks (kept in memory, written with the next record)."""
        self.damaged += other.damaged
        for task, variants in other.done.items():
            for key, value in variants.items():
                if key not in self.done.get(task, {}):
                    self.done.setdefault(task, {})[key] = value
                    self.checks.setdefault(task, {})[key] = other.checks.get(task, {}).get(key, {})

    def has(self, task: str, layer: int | None) -> bool:
        """Whether the evaluation of `task` on variant `layer` is recorded."""
        return variant_key(layer) in self.done.get(task, {})

    def count(self) -> int:
        """How many (task, variant) evaluations are recorded."""
        return sum(len(variants) for variants in self.done.values())

    def get(self, task: str, layer: int | None) -> Evaluation:
        """The recorded evaluation of `task` on variant `layer` (KeyError if there is none)."""
        return evaluation_from_dict(self.done[task][variant_key(layer)])

    def record(
        self, task: str, layer: int | None, evaluation: Evaluation, rows: Sequence[Mapping[str, object]] | None = None
    ) -> None:
        """Keep one finished evaluation (and the checksum of its per-document `rows`); write the state to disk."""
        # evaluation_to_dict builds JSON-ready values only (numbers, strings, lists, dicts).
        entry = cast(JSONObject, evaluation_to_dict(evaluation))
        key = variant_key(layer)
        self.done.setdefault(task, {})[key] = entry
        self.checks.setdefault(task, {})[key] = {"record": checksum(entry), "rows": checksum(rows or [])}
        write_json(self.path, PruneProgress(self.fingerprint, self.done, self.checks).to_dict())

    def rows_check(self, task: str, layer: int | None) -> str | None:
        """The checksum of the per-document rows recorded with (task, variant), None if unknown."""
        return self.checks.get(task, {}).get(variant_key(layer), {}).get("rows")

    def variants(self, task: str) -> list[int | None]:
        """The variants recorded for `task` (None: the baseline)."""
        return [None if key == BASELINE_KEY else int(key) for key in self.done.get(task, {})]

    def forget(self, task: str, layer: int | None) -> None:
        """Drop one recorded evaluation so that it is evaluated again (its per-document rows are lost)."""
        self.done.get(task, {}).pop(variant_key(layer), None)
        self.checks.get(task, {}).pop(variant_key(layer), None)

    def remove(self) -> None:
        """Delete the progress file: the run's result is written."""
        self.path.unlink(missing_ok=True)
