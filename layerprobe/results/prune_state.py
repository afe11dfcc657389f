"""The files of an unfinished prune-drop: its progress file (`--resume`) and a shard (`--shard i/N`).

Both hold finished evaluations in `evaluation_to_dict`'s form, by task and variant key ("baseline" or
a removed block's index), with the fingerprint of the experiment that produced them. They are read
back hours later, maybe after a hand edit or a truncated copy, so they are validated field by field
like every result file: a bad shard is one line naming the file and the JSON path, before any work.

The progress file is resume state, not a result: each record carries a checksum (`checks`: of the
evaluation and of its per-document rows), and `PruneProgress.salvage` keeps only the records that are
intact, so whatever was damaged is computed again (the caller says how many) instead of failing the run.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from layerprobe.core import ResultError
from layerprobe.results.evaluation import evaluation_from_dict
from layerprobe.results.io import PARTIAL_SCHEMA, SHARD_SCHEMA, check_schema, checksum
from layerprobe.results.json_types import JSONObject, Record
from layerprobe.results.provenance import ModelInfo, RunInfo
from layerprobe.results.validate import Node

Done = dict[str, dict[str, JSONObject]]  # task → variant key → evaluation (`evaluation_to_dict`'s form)
# task → variant key → {"record": checksum of the evaluation, "rows": checksum of its per-document rows}
Checks = dict[str, dict[str, dict[str, str]]]


def read_done(node: Node, tasks: list[str] | None = None) -> Done:
    """The `done` block: every evaluation checked now, once, so a bad entry is named before hours of work.

    With `tasks`, every task of the block must be one of them.
    """
    done: Done = {}
    for task, variants in node.entries():
        if tasks is not None and task not in tasks:
            variants.fail(f"a task of settings.tasks ({', '.join(tasks)})", "got an unknown task")
        done[task] = {}
        for key, entry in variants.entries():
            evaluation_from_dict(entry)
            done[task][key] = entry.obj()
    return done


@dataclass(frozen=True)
class PruneProgress:
    """prune_drop.partial.json: the evaluations a prune-drop has finished, and which experiment they belong to.

    `checks` holds, per record, the checksum of the evaluation and of its per-document rows (`io.checksum`).
    """

    fingerprint: Record
    done: Done
    checks: Checks = field(default_factory=dict)

    def to_dict(self) -> dict[str, object]:
        return {"schema": PARTIAL_SCHEMA, "fingerprint": self.fingerprint, "done": self.done, "checks": self.checks}

    @classmethod
    def from_dict(cls, data: JSONObject, source: str) -> PruneProgress:
        """Validate the fingerprint's type and every recorded evaluation (absent blocks read as empty).

        Raises:
            ResultError: naming `source` and the JSON path of the first bad field.
        """
        root = Node(data, source)
        check_schema(root, PARTIAL_SCHEMA, refusal=f"{source} is not a prune-drop progress file.")
        fingerprint, done = root.key("fingerprint"), root.key("done")
        return cls(
            fingerprint=fingerprint.obj() if fingerprint.present else {},
            done=read_done(done) if done.present else {},
            checks=_read_checks(root.key("checks")),
        )

    @classmethod
    def salvage(cls, data: JSONObject, source: str) -> tuple[PruneProgress, int]:
        """The intact records of a progress file, and how many were dropped as damaged.

        A record is kept only if it reads as an evaluation and its checksum matches (a record without one,
        of an older file, is dropped too): a wrong shape, a string or NaN where a number belongs, or an
        edited number means that (task, variant) is evaluated again. The file's schema and fingerprint are
        still checked strictly: they decide whether it belongs to this run at all.

        Raises:
            ResultError: another file's schema, or a fingerprint that is not an object.
        """
        root = Node(data, source)
        check_schema(root, PARTIAL_SCHEMA, refusal=f"{source} is not a prune-drop progress file.")
        fingerprint = root.key("fingerprint")
        checks = _read_checks(root.key("checks"))
        done: Done = {}
        kept: Checks = {}
        dropped = 0
        block: object = root.key("done").value if root.key("done").present else {}
        if not isinstance(block, dict):
            return cls(fingerprint.obj() if fingerprint.present else {}, {}, {}), 1
        for task, variants in block.items():
            if not isinstance(variants, dict):
                dropped += len(variants) if isinstance(variants, list) and variants else 1
                continue
            for key, entry in variants.items():
                check = checks.get(task, {}).get(key, {})
                if not (key == "baseline" or (key.isascii() and key.isdigit())) or not _intact(
                    entry, check.get("record"), f"{source}: done.{task}.{key}"
                ):
                    dropped += 1
                    continue
                done.setdefault(task, {})[key] = entry
                kept.setdefault(task, {})[key] = check
        return cls(fingerprint.obj() if fingerprint.present else {}, done, kept), dropped


def _intact(entry: object, expected: str | None, source: str) -> bool:
    """Whether `entry` reads as an evaluation and has the checksum `expected`."""
    if not isinstance(entry, dict) or expected is None or checksum(entry) != expected:
        return False
    try:
        evaluation_from_dict(entry, source)
    except ResultError:
        return False
    return True


def _read_checks(node: Node) -> Checks:
    """The `checks` block, keeping only well-formed entries (a damaged one just leaves its record unchecked)."""
    value = node.value if node.present else None
    if not isinstance(value, dict):
        return {}
    checks: Checks = {}
    for task, variants in value.items():
        if not isinstance(variants, dict):
            continue
        for key, check in variants.items():
            if isinstance(check, dict):
                checks.setdefault(task, {})[key] = {k: v for k, v in check.items() if isinstance(v, str)}
    return checks


@dataclass(frozen=True)
class PruneShard:
    """prune_drop.shard.json: one job's evaluations (its own variants) and what `merge` needs to check and join.

    `tasks` and `layers` are `settings.tasks` and `settings.layers`, read out and checked.
    """

    shard: str
    fingerprint: Record
    model: ModelInfo
    settings: Record
    tasks: list[str]
    layers: list[int]
    variants: list[str]
    done: Done
    samples: dict[str, list[JSONObject]]  # task → this shard's per-document rows, for the paired stderrs
    angular: str | None
    run: RunInfo

    def identity(self) -> dict[str, Record]:
        """What the shards of one run share exactly: the experiment's fingerprint, its settings and model."""
        return {"fingerprint": self.fingerprint, "settings": self.settings, "model": asdict(self.model)}

    def to_dict(self) -> dict[str, object]:
        return {
            "schema": SHARD_SCHEMA,
            "shard": self.shard,
            "fingerprint": self.fingerprint,
            "model": asdict(self.model),
            "settings": self.settings,
            "variants": self.variants,
            "done": self.done,
            "samples": self.samples,
            "angular": self.angular,
            "run": asdict(self.run),
        }

    @classmethod
    def from_dict(cls, data: JSONObject, source: str) -> PruneShard:
        """Validate every field; the `run` block must hold its start and duration (merge adds them up).

        Raises:
            ResultError: naming `source` and the JSON path of the first bad field.
        """
        root = Node(data, source)
        check_schema(
            root,
            SHARD_SCHEMA,
            refusal=f"{source} is not a prune-drop shard.",
            hint="Pass the --out folders of `--shard i/N` runs.",
        )
        settings = root.key("settings")
        tasks = [item.text(nonempty=True) for item in settings.key("tasks").items(min_length=1)]
        samples = root.key("samples")
        run = root.key("run")
        run.key("started_at").text()
        run.key("seconds").number(low=0.0)
        return cls(
            shard=root.key("shard").text(),
            fingerprint=root.key("fingerprint").obj(),
            model=ModelInfo.from_dict(root.key("model")),
            settings=settings.obj(),
            tasks=tasks,
            layers=[item.integer(minimum=0) for item in settings.key("layers").items()],
            variants=[item.text() for item in root.key("variants").items()],
            done=read_done(root.key("done"), tasks),
            samples={
                task: [row.obj() for row in rows.items()] for task, rows in (samples.entries() if samples.given else [])
            },
            angular=root.key("angular").text(optional=True),
            run=RunInfo.from_dict(run),
        )
