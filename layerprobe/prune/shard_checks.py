"""What `layerprobe merge` checks in every shard before it joins any: a shard file is trusted for nothing.

A shard is a file another job wrote, perhaps long ago, perhaps copied by hand. Merged as it stands, a
shard with rows missing gives a different stderr, one with a foreign variant makes the result depend on
the order the shards are given, one with a variant the model does not have gives a row for a block that
never existed. So each shard is checked against itself (its `i/N` names exactly which variants it holds,
every task of its settings has a result for each, every result is readable, every per-document row is one
layerprobe wrote, one per variant × document, as many as the result says it scored), and the shards
against each other (`documents_agree`: every variant of a full run was scored on the baseline's documents;
a sequential run's variants on some of their own share's baseline's).
Any mismatch is one line naming the shard file and what is wrong.
"""

from __future__ import annotations

import numbers
import re
from collections.abc import Mapping
from pathlib import Path
from typing import NoReturn

from layerprobe.core import ResultError, Share
from layerprobe.prune.samples import SampleRow
from layerprobe.prune.sequential import with_baseline
from layerprobe.prune.state import variant_key
from layerprobe.results import JSONValue, Node, PruneShard, evaluation_from_dict

RERUN_HINT = "Run that shard again (prune-drop --shard i/N into an empty --out), then merge."
Document = tuple[str, object]  # (leaf task, doc_id)


def check_shard(path: Path, data: PruneShard) -> dict[str, dict[str, set[Document]]]:
    """Refuse a shard that does not hold exactly its own share, fully; its documents by task and variant key.

    Raises:
        ResultError: naming `path` and the first thing wrong.
    """
    share = _share(path, data.shard)
    num_layers = data.model.num_layers
    for block in data.layers:
        if not 0 <= block < num_layers:
            _refuse(
                path, f"its settings name block {block}, and the model has {num_layers} blocks (0-{num_layers - 1})"
            )
    sequential = "precision" in data.settings
    mine = share.of([None, *data.layers])
    expected = [variant_key(v) for v in (with_baseline(mine) if sequential else mine)]
    if len(set(data.variants)) != len(data.variants):
        _refuse(path, f"it lists a variant twice ({', '.join(data.variants)})")
    foreign = [k for k in data.variants if k not in expected]
    if foreign:
        _refuse(path, f"it carries variant(s) {', '.join(foreign)}, which are not shard {share}'s ({_list(expected)})")
    lacking = [k for k in expected if k not in data.variants]
    if lacking:
        _refuse(path, f"shard {share} lacks its variant(s) {', '.join(lacking)}")
    extra_tasks = sorted(set(data.done) - set(data.tasks))
    if extra_tasks:
        _refuse(path, f"it holds results of task(s) {', '.join(extra_tasks)} that its settings do not name")
    documents: dict[str, dict[str, set[Document]]] = {}
    for task in data.tasks:
        if task not in data.done:
            _refuse(path, f"task {task} is in its settings but has no results")
        found = data.done[task]
        stray = [k for k in found if k not in expected]
        if stray:
            _refuse(path, f"task {task} has results of variant(s) {', '.join(stray)}, which are not shard {share}'s")
        missing = [k for k in expected if k not in found]
        if missing:
            _refuse(path, f"task {task} has no result of variant(s) {', '.join(missing)}")
        if expected and task not in data.samples:
            _refuse(path, f"it has no per-document rows of task {task} (the paired stderrs need them)")
        documents[task] = _check_rows(path, task, found, data.samples.get(task, []), expected, sequential)
    return documents


def documents_agree(documents: dict[str, dict[str, tuple[Path, set[Document]]]], sequential: bool) -> None:
    """Refuse variants of one task scored on other documents than the baseline (a full run scores the same ones).

    `documents` maps task → variant key → (the shard that holds it, its documents). A sequential run
    (--precision) stops each variant early, against its own share's baseline (checked in `check_shard`).

    Raises:
        ResultError: naming the shard of the variant and how many documents differ.
    """
    if sequential:
        return
    for task, variants in documents.items():
        if "baseline" not in variants:
            continue
        _, baseline = variants["baseline"]
        for key, (path, docs) in variants.items():
            lacking, extra = len(baseline - docs), len(docs - baseline)
            if extra or lacking:
                _refuse(
                    path,
                    f"task {task}, variant {key} has per-document rows of other documents than the baseline "
                    f"({lacking} of the baseline's missing, {extra} not the baseline's)",
                )


def _check_rows(
    path: Path,
    task: str,
    found: Mapping[str, JSONValue],
    rows: list[SampleRow],
    expected: list[str],
    sequential: bool,
) -> dict[str, set[Document]]:
    """Check every row of `task` and the count per variant; the documents of each variant."""
    metrics: dict[str, list[str]] = {}
    counts: dict[str, int | None] = {}
    for key in expected:
        try:
            evaluation = evaluation_from_dict(Node(found[key], str(path), f"done.{task}.{key}"))
        except ResultError as exc:
            raise ResultError(
                f"{path}: its result of task {task}, variant {key} is not readable ({exc.message}).", hint=RERUN_HINT
            ) from None
        metrics[key], counts[key] = list(evaluation.per_sample), evaluation.samples
    documents: dict[str, set[Document]] = {key: set() for key in expected}
    for number, row in enumerate(rows, start=1):
        why = _bad_row(row, metrics)
        if why:
            _refuse(path, f"per-document row {number} of task {task} is not one layerprobe wrote ({why})")
        key = variant_key(row["variant"])
        document = (row["task"], row["doc_id"])
        if document in documents[key]:
            _refuse(path, f"task {task}, variant {key} has two rows for document {row['doc_id']} of {row['task']}")
        documents[key].add(document)
    baseline = documents.get("baseline", set())
    for key in expected:
        extra = len(documents[key] - baseline)
        if sequential and extra:  # each share's baseline was scored on the documents its variants use
            _refuse(
                path,
                f"task {task}, variant {key} has rows of {extra} document(s) its share's baseline was not scored on",
            )
        count = counts[key]
        if not sequential and count is not None and len(documents[key]) != count:
            _refuse(
                path,
                f"task {task}, variant {key} has {len(documents[key])} per-document rows; its result says it scored "
                f"{count} documents",
            )
    return documents


def _bad_row(row: object, metrics: dict[str, list[str]]) -> str | None:
    """Why `row` is not a per-document row of one of these variants (None: it is one)."""
    if not isinstance(row, dict):
        return "not an object"
    variant = row.get("variant", "absent")
    if variant is not None and (not isinstance(variant, int) or isinstance(variant, bool)):
        return f"variant {variant!r}"
    key = variant_key(variant)
    if key not in metrics:
        return f"variant {key} is not this shard's"
    if not isinstance(row.get("task"), str):
        return "no task"
    doc_id = row.get("doc_id")
    if not isinstance(doc_id, (int, str)) or isinstance(doc_id, bool):
        return "no doc_id"
    for metric in metrics[key]:
        if metric in row and not _value(row[metric]):
            return f"{metric} is {row[metric]!r}"
    if metrics[key] and not any(metric in row for metric in metrics[key]):
        return f"none of the metrics {', '.join(metrics[key])}"
    return None


def _value(value: object) -> bool:
    """A per-document value: a number, or a list of numbers and strings (a generation metric's parts)."""
    if isinstance(value, bool):
        return True
    if isinstance(value, numbers.Real):
        return True
    return isinstance(value, list) and all(isinstance(v, (str, numbers.Real)) for v in value)


def _share(path: Path, text: str) -> Share:
    match = re.fullmatch(r"(\d+)/(\d+)", text)
    if not match or not 0 <= int(match[1]) < int(match[2]):
        _refuse(path, f"its shard {text!r} is not i/N with 0 ≤ i < N")
    assert match is not None
    return Share(int(match[1]), int(match[2]))


def _list(keys: list[str]) -> str:
    return ", ".join(keys) if keys else "none"


def _refuse(path: Path, what: str) -> NoReturn:
    raise ResultError(f"{path}: {what}.", hint=RERUN_HINT)
