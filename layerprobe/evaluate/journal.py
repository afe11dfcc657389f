"""The shared engine's answers on disk, batch by batch, so a killed run loses only the batch in flight.

The shared-prefix engine answers every variant of a request during the baseline evaluation, which on a
70B model is hours; until that evaluation ends nothing reaches prune_drop.partial.json. This journal
appends each scored batch as one JSON line (log-likelihood and greedy flag per request and variant;
floats round-trip exactly through JSON) and fsyncs it. A resumed run reads it back into the engine's
store, and lm-eval's requests found there are not computed again. The first line names the experiment
(the prune-drop fingerprint) and the variants the engine computes: a journal of another experiment is
refused, one of another split of variants (a different number of ranks) is started over.

Every batch line carries `check`, the checksum of its keys and answers (`results.checksum`). Reading back,
a line that is not JSON, has the wrong shape (fewer answers than keys, a string or NaN where a number
belongs, an unknown variant) or whose checksum does not match is dropped, and its requests are computed
again; `dropped` counts those lines so that the run can say so. An unreadable first line starts over.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import IO

from layerprobe.core import ResultError
from layerprobe.results import ANSWERS_SCHEMA as JOURNAL_SCHEMA
from layerprobe.results import checksum

Key = tuple[tuple[int, ...], tuple[int, ...]]  # a loglikelihood request: context and continuation token ids
Answer = tuple[float, bool]  # its log-likelihood, and whether greedy decoding gives the continuation
Store = dict[Key, dict["int | None", Answer]]  # request → variant (None: the baseline) → answer


def _variant(text: str) -> int | None:
    """A variant as the journal spells it ("baseline" or a block index) → None or the index."""
    return None if text == "baseline" else int(text)


class AnswerJournal:
    """Append-only JSON lines of (request → answer per variant); `open` returns it with what it held."""

    def __init__(self, path: Path, dropped: int = 0, reused: int = 0) -> None:
        """The journal at `path`; `dropped` damaged and `reused` intact batch lines were read back from it."""
        self.path = path
        self.dropped = dropped
        self.reused = reused

    @classmethod
    def open(
        cls, path: Path, fingerprint: dict[str, object], layers: list[int], resume: bool
    ) -> tuple[AnswerJournal, Store]:
        """The journal at `path` and the answers it already holds (none unless resuming the same run)."""
        header: dict[str, object] = {"schema": JOURNAL_SCHEMA, "fingerprint": fingerprint, "layers": sorted(layers)}
        store: Store = {}
        dropped = reused = 0
        if path.is_dir():
            raise ResultError(
                f"{path} is a directory; prune-drop keeps its answer journal under that name.",
                hint="Move that directory away, or use another --out.",
            )
        if path.exists():
            if not resume:
                raise ResultError(
                    f"{path} holds the answers of an unfinished prune-drop run.",
                    hint="Add --resume to continue it, or delete that file (or use another --out) to start over.",
                )
            store, dropped, reused = _read(path, header)
        if not store:
            with open(path, "w", encoding="utf-8") as handle:
                handle.write(json.dumps(header) + "\n")
                _sync(handle)
        return cls(path, dropped, reused), store

    def append(self, answers: dict[int | None, dict[Key, Answer]]) -> None:
        """Write one scored batch (answers by variant, then request) and make it durable before returning."""
        keys = list(next(iter(answers.values())))
        line: dict[str, object] = {
            "keys": [[list(c), list(t)] for c, t in keys],
            "answers": {
                "baseline" if v is None else str(v): [[by_key[k][0], by_key[k][1]] for k in keys]
                for v, by_key in answers.items()
            },
        }
        line["check"] = checksum(line)
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(line) + "\n")
            _sync(handle)

    def remove(self) -> None:
        """Delete the journal: the run it served has written its result."""
        self.path.unlink(missing_ok=True)


def _read(path: Path, header: dict[str, object]) -> tuple[Store, int, int]:
    """The stored answers, if the journal belongs to this experiment and split of variants.

    Also how many batch lines were dropped as damaged, and how many were read back intact.
    """
    lines = path.read_bytes().decode("utf-8", errors="replace").splitlines()
    try:
        stored = json.loads(lines[0]) if lines else {}
    except (json.JSONDecodeError, RecursionError):
        stored = {}
    if not isinstance(stored, dict) or stored.get("schema") != JOURNAL_SCHEMA:
        return {}, max(0, len(lines) - 1), 0  # not even its header is readable: every batch is computed again
    if stored.get("fingerprint") != header["fingerprint"]:
        raise ResultError(
            f"--resume refuses to reuse {path}: it holds answers of a different run.",
            hint=f"Use another --out directory, or delete {path} to start over.",
        )
    if stored.get("layers") != header["layers"]:
        return {}, 0, 0  # another split of the variants: its rows lack some of ours
    variants = {"baseline", *(str(layer) for layer in header["layers"])}  # type: ignore[attr-defined]
    store: Store = {}
    dropped = reused = 0
    for text in lines[1:]:
        batch = _batch(text, variants)
        if batch is None:  # cut short by a kill, or damaged since
            dropped += bool(text.strip())
            continue
        reused += 1
        for key, by_variant in batch.items():
            store.setdefault(key, {}).update(by_variant)
    return store, dropped, reused


def _batch(text: str, variants: set[str]) -> dict[Key, dict[int | None, Answer]] | None:
    """One journal line's answers by request, or None unless it is whole, well-formed and its checksum matches."""
    try:
        line = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        return None
    if not isinstance(line, dict) or set(line) != {"keys", "answers", "check"}:
        return None
    if checksum({"keys": line["keys"], "answers": line["answers"]}) != line["check"]:
        return None
    keys, answers = line["keys"], line["answers"]
    if not isinstance(keys, list) or not isinstance(answers, dict) or not set(answers) <= variants:
        return None
    if not all(_is_key(k) for k in keys):
        return None
    batch: dict[Key, dict[int | None, Answer]] = {}
    for variant, values in answers.items():
        if not isinstance(values, list) or len(values) != len(keys) or not all(_is_answer(v) for v in values):
            return None
        for (context, target), (total, hit) in zip(keys, values, strict=True):
            batch.setdefault((tuple(context), tuple(target)), {})[_variant(variant)] = (float(total), hit)
    return batch


def _is_key(value: object) -> bool:
    """[context ids, continuation ids]: two lists of non-negative integers."""
    return (
        isinstance(value, list)
        and len(value) == 2
        and all(isinstance(part, list) for part in value)
        and all(type(i) is int and i >= 0 for part in value for i in part)
    )


def _is_answer(value: object) -> bool:
    """[log-likelihood, greedy]: a finite number (or −inf) and a boolean."""
    if not isinstance(value, list) or len(value) != 2:
        return False
    total, hit = value
    number = isinstance(total, (int, float)) and not isinstance(total, bool)
    return number and not math.isnan(total) and total != math.inf and isinstance(hit, bool)


def _sync(handle: IO[str]) -> None:
    """Flush `handle` through to the disk: a line is durable once written."""
    handle.flush()
    os.fsync(handle.fileno())
