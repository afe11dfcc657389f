"""The names of every file a run writes, in one place: `RunDir(path).angular_json`, `.sample_file(task)`, ….

A run directory (`--out`) collects what the commands write: the result files that `compare` pairs by
name across two directories, the resume state of an unfinished prune-drop, the plots. Every command,
the gate and the plots form those paths here, so a file is never named two ways.

Task names become parts of file names (`prune_drop_<task>.png`, `samples/<task>.jsonl`); a task may be
a path or hold spaces (`mmlu/abstract algebra`), so it is sanitised. Three rules exist today, each kept
byte-for-byte so that existing run directories keep their names (a later change may unify them):

- `figure_name`: prune-drop plots; anything but letters, digits, '.', '_', '-' becomes '_', leading and
  trailing dots are stripped, an empty result becomes "task"; repeats get "-2", "-3"… (`task_plots`).
- `sample_name`: per-document sample logs; the same replacement, nothing stripped.
- `curve_name`: prune-curve plots; only '/' becomes '_'.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

ANGULAR_JSON = "angular.json"
PRUNE_DROP_JSON = "prune_drop.json"
DEPTH_JSON = "depth.json"
PRUNE_CURVE_JSON = "prune_curve.json"
PRUNE_DROP_PARTIAL_JSON = "prune_drop.partial.json"  # the resume state of a prune-drop (one per rank)
PRUNE_DROP_PARTIAL_SAMPLES = "prune_drop.partial.samples"  # per-document rows while a run is in progress
ROUNDS_SUFFIX = ".rounds.jsonl"  # --precision: the rounds scored so far, per task, in the partial samples folder
SAMPLES_DIR = "samples"  # --log-samples: <out>/samples/<task>.jsonl
SHARD_JSON = "prune_drop.shard.json"  # prune-drop --shard i/N
LOCK_FILE = ".layerprobe.lock"  # held while a command writes the run directory (results/lock.py)
EXPORT_RECORD = "layerprobe.json"  # in an exported checkpoint: what was removed, from which source
# Beside `prune --save DIR`: DIR.layerprobe-tmp-<pid> (being written), DIR.layerprobe-old (the checkpoint
# being replaced, complete), DIR.layerprobe-trash-<pid> (the replaced one, being removed).
EXPORT_STAGING = ".layerprobe-tmp-"
EXPORT_BACKUP = ".layerprobe-old"
EXPORT_TRASH = ".layerprobe-trash-"
STABILITY_JSON = "stability.json"  # layerprobe stability: ranking agreement across several results
STABILITY_MD = "stability.md"  # the same, as a markdown report
COMPARE_JSON = "compare.json"  # `compare --format json`, as the API's verdict.save(dir) writes it
TRACK_JSON = "track.json"  # `layerprobe track`: the history of several runs
HEAL_JSON = "heal.json"  # `layerprobe heal`: the healed cut on held-out text
GAIN_JSON = "gain.json"  # `layerprobe gain`: parameters, bytes, memory and speed against the original
TRACK_MD = "track.md"  # the same history as a GitHub markdown table (for $GITHUB_STEP_SUMMARY)
REPORT_HTML = "report.html"  # `layerprobe report`: one self-contained page
# The result files `compare` pairs by name across two run directories, by kind.
RESULT_FILES = {"angular": ANGULAR_JSON, "prune_drop": PRUNE_DROP_JSON, "depth": DEPTH_JSON, "heal": HEAL_JSON}
# The result files `track` and `report` read from a run directory, by kind (whichever are there).
REVIEWED_FILES = {**RESULT_FILES, "prune_curve": PRUNE_CURVE_JSON}
# Figures: kind → file stem (`angular.png`, `prune_drop_<task>.png`, `compare_<kind>.png`…).
FIGURES = ("angular", "depth", "prune_drop", "prune_curve", "compare", "stability", "track", "heal", "gain")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


# What a run writes that a checkpoint never holds, by name, wherever it lies: `--out` may be inside a model's
# own directory, and the model's stat digest (prune/state.py) must not change because the run wrote there.
_OWN_FILE = re.compile(
    r"(?:angular|depth|prune_drop|prune_curve|stability|track|compare)\.(?:json|md)"
    r"|prune_drop\.(?:partial(?:\.rank\d+)?\.json|answers(?:\.rank\d+)?\.jsonl|shard\.json)"
    r"|report\.html|\.layerprobe\.lock.*|\..+\.(?:\d+-)?[0-9a-f]{8}\.tmp"
    r"|(?:angular|depth|prune_drop|prune_curve|compare|stability|track)(?:_.*)?\.(?:png|pdf|svg)"
)
_OWN_FOLDER = re.compile(rf"{re.escape(PRUNE_DROP_PARTIAL_SAMPLES)}(?:\.rank\d+)?|{SAMPLES_DIR}")


def is_run_file(relative: Path) -> bool:
    """Whether a path (relative to a folder being digested) is one layerprobe's runs write, not a checkpoint's."""
    *folders, name = relative.parts
    return bool(_OWN_FILE.fullmatch(name)) or any(_OWN_FOLDER.fullmatch(folder) for folder in folders)


def figure_name(task: str) -> str:
    """A task as part of a prune-drop figure's name: `mmlu/abstract algebra` → `mmlu_abstract_algebra`."""
    return _UNSAFE.sub("_", task).strip(".") or "task"


def sample_name(task: str) -> str:
    """`<task>.jsonl`, with anything but letters, digits, '.', '_' and '-' made '_' (a task may be a path)."""
    return _UNSAFE.sub("_", task) + ".jsonl"


def curve_name(task: str) -> str:
    """A task as part of a prune-curve figure's name: only '/' is replaced."""
    return task.replace("/", "_")


def rank_suffix(rank: int, size: int) -> str:
    """What a process of a multi-process launch adds to its own progress files' names ("" when alone)."""
    return "" if size == 1 else f".rank{rank}"


@dataclass(frozen=True)
class ExportPlaces:
    """The directories beside an export's destination (`prune --save DIR`) while it replaces DIR.

    `staging(pid)` is where a process writes the new checkpoint, `backup` where the checkpoint being
    replaced waits (always complete: it gets there by one rename), `trash(pid)` where it is removed.
    """

    destination: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "destination", Path(self.destination))

    def staging(self, pid: int) -> Path:
        return self.destination.with_name(f"{self.destination.name}{EXPORT_STAGING}{pid}")

    @property
    def backup(self) -> Path:
        return self.destination.with_name(f"{self.destination.name}{EXPORT_BACKUP}")

    def trash(self, pid: int) -> Path:
        return self.destination.with_name(f"{self.destination.name}{EXPORT_TRASH}{pid}")

    def leftovers(self) -> list[tuple[Path, int]]:
        """The staging and trash directories beside the destination (only names of exactly this pattern), with pids."""
        pattern = re.compile(
            re.escape(self.destination.name) + f"(?:{re.escape(EXPORT_STAGING)}|{re.escape(EXPORT_TRASH)})([0-9]+)"
        )
        found = []
        try:
            entries = sorted(self.destination.parent.iterdir())
        except OSError:
            return []
        for entry in entries:
            match = pattern.fullmatch(entry.name)
            if match and entry.is_dir() and not entry.is_symlink():
                found.append((entry, int(match[1])))
        return found


@dataclass(frozen=True)
class RunDir:
    """A run directory and the name of every file layerprobe writes there."""

    path: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path))

    # --- results ----------------------------------------------------------------------------------

    @property
    def angular_json(self) -> Path:
        return self.path / ANGULAR_JSON

    @property
    def prune_drop_json(self) -> Path:
        return self.path / PRUNE_DROP_JSON

    @property
    def depth_json(self) -> Path:
        return self.path / DEPTH_JSON

    @property
    def prune_curve_json(self) -> Path:
        return self.path / PRUNE_CURVE_JSON

    def result_json(self, kind: str) -> Path:
        """The result file of `kind` ("angular", "prune_drop" or "depth"), as `compare` pairs them."""
        return self.path / RESULT_FILES[kind]

    def present_results(self) -> dict[str, Path]:
        """The files of `REVIEWED_FILES` this directory holds, by kind: what `track` and `report` read."""
        return {kind: self.path / name for kind, name in REVIEWED_FILES.items() if (self.path / name).is_file()}

    @property
    def heal_json(self) -> Path:
        return self.path / HEAL_JSON

    @property
    def gain_json(self) -> Path:
        return self.path / GAIN_JSON

    @property
    def heal_checkpoint(self) -> Path:
        """`heal-state/`: LoRA's resumable checkpoint (adapters, optimiser, step) while `heal` trains."""
        return self.path / "heal-state"

    @property
    def track_json(self) -> Path:
        return self.path / TRACK_JSON

    @property
    def track_md(self) -> Path:
        return self.path / TRACK_MD

    @property
    def report_html(self) -> Path:
        """`report.html`, where `layerprobe report --out DIR` writes its page."""
        return self.path / REPORT_HTML

    @property
    def compare_json(self) -> Path:
        return self.path / COMPARE_JSON

    @property
    def stability_json(self) -> Path:
        return self.path / STABILITY_JSON

    @property
    def stability_md(self) -> Path:
        return self.path / STABILITY_MD

    @property
    def export_record(self) -> Path:
        """`layerprobe.json` of an exported checkpoint (the directory is the checkpoint)."""
        return self.path / EXPORT_RECORD

    def lock_file(self, suffix: str = "") -> Path:
        """The lock a command holds while it writes here (`suffix`: a process's `rank_suffix`)."""
        return self.path / f"{LOCK_FILE}{suffix}"

    # --- an unfinished prune-drop -------------------------------------------------------------------

    def partial_json(self, suffix: str = "") -> Path:
        """The progress file (`suffix`: a process's `rank_suffix` in a multi-process launch)."""
        stem, ext = os.path.splitext(PRUNE_DROP_PARTIAL_JSON)
        return self.path / f"{stem}{suffix}{ext}"

    def partial_jsons(self) -> list[Path]:
        """Every process's progress file in the directory, sorted."""
        stem, ext = os.path.splitext(PRUNE_DROP_PARTIAL_JSON)
        return sorted(self.path.glob(f"{stem}*{ext}"))

    def partial_samples(self, suffix: str = "") -> Path:
        """The folder of per-document rows while the run is in progress (one per process)."""
        return self.path / f"{PRUNE_DROP_PARTIAL_SAMPLES}{suffix}"

    def partial_sample_file(self, task: str, suffix: str = "") -> Path:
        return self.partial_samples(suffix) / sample_name(task)

    def partial_round_file(self, task: str, suffix: str = "") -> Path:
        """A sequential run's (--precision) per-round rows of `task`, beside its sample rows."""
        return self.partial_samples(suffix) / (sample_name(task).removesuffix(".jsonl") + ROUNDS_SUFFIX)

    def journal(self, suffix: str = "") -> Path:
        """The shared engine's answer journal (`evaluate/journal.py`), one per process."""
        return self.path / f"prune_drop.answers{suffix}.jsonl"

    def journals(self) -> list[Path]:
        """Every process's answer journal in the directory, sorted (what a finished run removes)."""
        return sorted(p for p in self.path.glob("prune_drop.answers*.jsonl") if p.is_file())

    @property
    def shard_json(self) -> Path:
        return self.path / SHARD_JSON

    # --- per-document values ------------------------------------------------------------------------

    @property
    def samples_dir(self) -> Path:
        return self.path / SAMPLES_DIR

    def sample_file(self, task: str) -> Path:
        """`samples/<task>.jsonl` (`--log-samples`)."""
        return self.samples_dir / sample_name(task)

    # --- figures ------------------------------------------------------------------------------------

    def plot(self, kind: str, task: str | None = None, suffix: str = "png") -> Path:
        """A figure: `<kind>.<suffix>`, or `<kind>_<task>.<suffix>` with the task sanitised by its kind's rule.

        Kinds are `FIGURES`; `compare` takes the compared kind as its `task` (`compare_angular.png`), `track`
        what it draws (`track_lazy.png`).
        """
        if kind not in FIGURES:
            raise ValueError(f"no figure of kind {kind!r}")
        if task is None:
            return self.path / f"{kind}.{suffix}"
        part = {"prune_drop": figure_name, "prune_curve": curve_name}.get(kind, str)(task)
        return self.path / f"{kind}_{part}.{suffix}"

    def task_plots(self, kind: str, tasks: Iterable[str]) -> list[Path]:
        """One distinct figure per task; two tasks that sanitise alike (`a/b`, `a_b`) get `-2`, `-3`…."""
        used: set[str] = set()
        paths = []
        for task in tasks:
            path = self.plot(kind, task)
            candidate, k = path.name, 1
            while candidate in used:
                k += 1
                candidate = f"{path.stem}-{k}{path.suffix}"
            used.add(candidate)
            paths.append(path.with_name(candidate))
        return paths
