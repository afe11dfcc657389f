"""Per-document metric values of a prune-drop run, as JSON lines: kept while it runs, written out on request.

The paired ΔP uncertainty needs the baseline's per-document values next to every variant's, also after
`--resume`, so every finished evaluation appends its rows to `prune_drop.partial.samples/<task>.jsonl`
*before* the evaluation is recorded in the progress file. On resume, rows of variants the progress file
does not list (a crash between the two writes) are dropped, and variants listed without rows are
evaluated again; so the rows and the recorded scores always describe the same evaluations. The progress
file keeps a checksum of each evaluation's rows: a variant whose rows on disk no longer match it (a row
deleted, edited or added, a line of the wrong shape) is evaluated again too. When the run ends the folder
becomes `<out>/samples/` (`--log-samples`) or is deleted.

Each line: `{"variant": null | l, "task": leaf task, "doc_id": id, "<metric>": value, …}`; `variant` null
is the baseline; `task` is the lm-eval leaf task (a subject of a group such as MMLU), or "squad".
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from layerprobe.prune.state import PruneState
from layerprobe.results import RunDir, checksum, write_json_lines

# One document's values: {"variant": None | l, "task": leaf task, "doc_id": id, <metric>: value, …} (JSON).
SampleRow = dict[str, Any]


def _is_row(row: object) -> bool:
    """Whether a parsed line has a row's shape: an object whose variant is null or a block index."""
    if not isinstance(row, dict) or "variant" not in row:
        return False
    variant = row["variant"]
    return variant is None or (isinstance(variant, int) and not isinstance(variant, bool) and variant >= 0)


def is_sample_log(path: Path) -> bool:
    """Whether `path` is a per-document log layerprobe wrote: its first line is a row naming variant, task, doc_id."""
    try:
        with open(path, encoding="utf-8") as handle:
            first = handle.readline()
        row = json.loads(first)
    except (OSError, UnicodeDecodeError, ValueError):
        return False
    return isinstance(row, dict) and {"variant", "task", "doc_id"} <= set(row)


class SampleLog:
    """The per-document rows of one run, by task file."""

    def __init__(self, out_dir: Path, suffix: str = "") -> None:
        """The log of the run writing into `out_dir` (`suffix`: this rank's, in a multi-process launch)."""
        self.out_dir = Path(out_dir)
        self.run, self.suffix = RunDir(self.out_dir), suffix  # suffix: one folder per rank of a launch
        self.partial = self.run.partial_samples(suffix)
        self.stale_removed: list[Path] = []  # set by `finish`

    @classmethod
    def open(cls, out_dir: Path, resume: bool, suffix: str = "") -> SampleLog:
        """A log for this run; without `resume`, rows a previous run left behind are removed."""
        log = cls(out_dir, suffix)
        if not resume and log.partial.exists():
            shutil.rmtree(log.partial)
        return log

    def append(self, task: str, rows: list[SampleRow]) -> None:
        """Add rows and make sure they are on disk before returning (the progress file is written next)."""
        self.partial.mkdir(parents=True, exist_ok=True)
        with open(self.run.partial_sample_file(task, self.suffix), "a", encoding="utf-8") as handle:
            for row in rows:
                handle.write(json.dumps(row, allow_nan=True) + "\n")
            handle.flush()
            os.fsync(handle.fileno())

    def read(self, task: str) -> dict[int | None, list[SampleRow]]:
        """Rows by variant; if a variant was written twice, its last evaluation wins."""
        path = self.run.partial_sample_file(task, self.suffix)
        by_variant: dict[int | None, list[SampleRow]] = {}
        if not path.exists():
            return by_variant
        previous: int | None | str = "none yet"
        with open(path, encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except (json.JSONDecodeError, RecursionError):  # a line cut short by a crash: that evaluation is redone
                    continue
                if not _is_row(row):  # a damaged line: its variant's rows no longer match their checksum
                    continue
                variant = row["variant"]
                if variant != previous and variant in by_variant:
                    by_variant[variant] = []  # a new block of rows: a later evaluation of the same variant
                by_variant.setdefault(variant, []).append(row)
                previous = variant
        return by_variant

    def reconcile(self, state: PruneState) -> int:
        """After a resume: rows and recorded evaluations must describe the same evaluations.

        Rows of a variant the progress file does not list are dropped; a recorded evaluation whose rows
        are missing or differ from the checksum recorded with it (a deleted folder, a deleted or edited
        row) is forgotten, so it is evaluated again instead of leaving its ΔP unpaired or wrongly paired.
        Returns how many recorded evaluations were forgotten for damaged or missing rows.
        """
        forgotten = 0
        for task in list(state.done):
            recorded = set(state.variants(task))
            by_variant = self.read(task)
            intact = {v for v in recorded if v in by_variant and checksum(by_variant[v]) == state.rows_check(task, v)}
            for variant in recorded - self.keep_only(task, intact):
                state.forget(task, variant)
                forgotten += 1
        return forgotten

    def keep_only(self, task: str, variants: set[int | None]) -> set[int | None]:
        """Drop rows of variants not in `variants`; return the variants that have rows."""
        by_variant = self.read(task)
        kept = {v: rows for v, rows in by_variant.items() if v in variants}
        if kept != by_variant:
            self._rewrite(self.run.partial_sample_file(task, self.suffix), kept)
        return set(kept)

    def finish(self, tasks: list[str], keep: bool, main: bool = True) -> Path | None:
        """End of run: write `<out>/samples/<task>.jsonl` (baseline first, then blocks) if `keep`; clean up.

        The main process also removes the per-document files an earlier run into the same --out left in
        `samples/` (they describe other variants than the result beside them): only files layerprobe
        wrote (`is_sample_log`), never anything else; `stale_removed` lists those not replaced by this run's.
        """
        final = None
        written = {self.run.sample_file(task) for task in tasks} if keep else set()
        self.stale_removed = [] if not main else self._remove_stale(written)
        if keep:
            final = self.run.samples_dir
            final.mkdir(parents=True, exist_ok=True)
            for task in tasks:
                self._rewrite(self.run.sample_file(task), self.read(task))
        if self.partial.exists():
            shutil.rmtree(self.partial)
        return final

    def _remove_stale(self, replaced: set[Path]) -> list[Path]:
        """Delete layerprobe's sample logs in `samples/` (the folder too, once empty); the ones not in `replaced`."""
        folder = self.run.samples_dir
        if not folder.is_dir() or folder.is_symlink():
            return []
        removed = []
        for path in sorted(folder.glob("*.jsonl")):
            if path.is_file() and not path.is_symlink() and is_sample_log(path):
                path.unlink()
                if path not in replaced:
                    removed.append(path)
        if not any(folder.iterdir()):
            folder.rmdir()
        return removed

    @staticmethod
    def _rewrite(path: Path, by_variant: dict[int | None, list[SampleRow]]) -> None:
        """Write rows to `path` (baseline first, then blocks in order), atomically."""
        order = sorted(by_variant, key=lambda v: -1 if v is None else v)
        write_json_lines(path, [row for variant in order for row in by_variant[variant]])
