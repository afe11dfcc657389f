"""The shared engine's answers on disk, batch by batch, so a killed run loses only the batch in flight.

The shared-prefix engine answers every variant of a request during the baseline evaluation, which on a
70B model is hours; until that evaluation ends nothing reaches prune_drop.partial.json. This journal
appends each scored batch as one JSON line (log-likelihood and greedy flag per request and variant;
floats round-trip exactly through JSON) and fsyncs it. A resumed run reads it back into the engine's
store, and lm-eval's requests found there are not computed again. The first line names the experiment
(the prune-drop fingerprint) and the variants the engine computes: a journal of another experiment is
refused, one of another split of variants (a different number of ranks) is started over.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import IO

from layerprobe.core import ResultError
from layerprobe.results import ANSWERS_SCHEMA as JOURNAL_SCHEMA

Key = tuple[tuple[int, ...], tuple[int, ...]]  # a loglikelihood request: context and continuation token ids
Answer = tuple[float, bool]  # its log-likelihood, and whether greedy decoding gives the continuation
Store = dict[Key, dict["int | None", Answer]]  # request → variant (None: the baseline) → answer


def _variant(text: str) -> int | None:
    """A variant as the journal spells it ("baseline" or a block index) → None or the index."""
    return None if text == "baseline" else int(text)


class AnswerJournal:
    """Append-only JSON lines of (request → answer per variant); `open` returns it with what it held."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def open(
        cls, path: Path, fingerprint: dict[str, object], layers: list[int], resume: bool
    ) -> tuple[AnswerJournal, Store]:
        """The journal at `path` and the answers it already holds (none unless resuming the same run)."""
        header: dict[str, object] = {"schema": JOURNAL_SCHEMA, "fingerprint": fingerprint, "layers": sorted(layers)}
        store: Store = {}
        if path.exists():
            if not resume:
                raise ResultError(
                    f"{path} holds the answers of an unfinished prune-drop run.",
                    hint="Add --resume to continue it, or delete that file (or use another --out) to start over.",
                )
            store = _read(path, header)
        if not store:
            with open(path, "w", encoding="utf-8") as handle:
                handle.write(json.dumps(header) + "\n")
                _sync(handle)
        return cls(path), store

    def append(self, answers: dict[int | None, dict[Key, Answer]]) -> None:
        """Write one scored batch (answers by variant, then request) and make it durable before returning."""
        keys = list(next(iter(answers.values())))
        line = {
            "keys": [[list(c), list(t)] for c, t in keys],
            "answers": {
                "baseline" if v is None else str(v): [[by_key[k][0], by_key[k][1]] for k in keys]
                for v, by_key in answers.items()
            },
        }
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(line) + "\n")
            _sync(handle)

    def remove(self) -> None:
        """Delete the journal: the run it served has written its result."""
        self.path.unlink(missing_ok=True)


def _read(path: Path, header: dict[str, object]) -> Store:
    """The stored answers, if the journal belongs to this experiment and split of variants."""
    lines = path.read_text(encoding="utf-8").splitlines()
    try:
        stored = json.loads(lines[0]) if lines else {}
    except json.JSONDecodeError:
        stored = {}
    if stored.get("schema") != JOURNAL_SCHEMA:
        return {}
    if stored.get("fingerprint") != header["fingerprint"]:
        raise ResultError(
            f"--resume refuses to reuse {path}: it holds answers of a different run.",
            hint=f"Use another --out directory, or delete {path} to start over.",
        )
    if stored.get("layers") != header["layers"]:
        return {}  # another split of the variants: its rows lack some of ours
    store: Store = {}
    for text in lines[1:]:
        try:
            line = json.loads(text)
        except json.JSONDecodeError:  # the batch being written when the run was killed
            break
        keys = [(tuple(c), tuple(t)) for c, t in line["keys"]]
        for variant, values in line["answers"].items():
            for key, (total, hit) in zip(keys, values, strict=True):
                store.setdefault(key, {})[_variant(variant)] = (float(total), bool(hit))
    return store


def _sync(handle: IO[str]) -> None:
    """Flush `handle` through to the disk: a line is durable once written."""
    handle.flush()
    os.fsync(handle.fileno())
