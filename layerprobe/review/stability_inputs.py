"""One result file → its per-block scores (lower = more prunable) and what their sampling noise is known from.

`layerprobe stability` ranks the blocks of every input from most to least prunable:

- angular.json: by the adjacent distance d(x^l, x^(l+1)) (a block that barely turns its input goes first).
  Its noise: the per-window rows `adjacent_windows` (weighted by `window_positions`), resampled by window.
- prune_drop.json: by the score lost when the block is removed, −ΔP for a higher-is-better metric and
  +ΔP for a lower-is-better one (the block whose removal costs least goes first). Its noise: the
  per-document values of `samples/<task>.jsonl` beside it (`--log-samples`), as the paired difference
  variant − baseline per document, resampled by document jointly across blocks.

Where those values are missing or do not reproduce the file's own scores, the input falls back to a
parametric bootstrap from its standard errors, and `note` says why.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from layerprobe.core import LayerprobeError
from layerprobe.results import (
    ANGULAR_KIND,
    PRUNE_DROP_KIND,
    AngularResult,
    MetricDrop,
    ModelInfo,
    Node,
    PruneDropResult,
    Record,
    RunDir,
    read_json_lines,
)
from layerprobe.stats import BlockScores

# The per-window / per-document means must give back the file's scores to this (relative) precision.
REPRODUCTION_TOLERANCE = 1e-9
PAIRED_MEAN = "paired_mean"  # prune-drop's delta_method when ΔP is a mean over documents


@dataclass(frozen=True)
class ScoredInput:
    """One input's scores per block it scored (finite scores only), with what the bootstrap redraws.

    Attributes:
        model: The input's model block.
        kind: "angular" or "prune_drop".
        task, metric, higher_is_better: What a prune-drop input ranks (None for angular).
        data: What it was measured on (the angular data block; the task's settings).
        scores: Block → score, lower = more prunable.
        units: Per-window or per-document values, (n, blocks in `scores` order), or None.
        weights: Per-unit weights (a window's positions), or None (equal weights).
        stderr: Block → standard error, for the parametric fallback (used when `units` is None).
        note: Why the per-unit values are not used (None when they are).
    """

    model: ModelInfo
    kind: str
    task: str | None
    metric: str | None
    higher_is_better: bool | None
    data: Record
    scores: dict[int, float]
    units: np.ndarray | None
    weights: np.ndarray | None
    stderr: dict[int, float]
    note: str | None

    @property
    def resampled(self) -> str:
        """What the bootstrap redraws: "windows", "documents" or "stderr" (see results.StabilityInput)."""
        if self.units is None:
            return "stderr"
        return "windows" if self.kind == ANGULAR_KIND else "documents"

    def block_scores(self, blocks: list[int]) -> BlockScores:
        """The scores of `blocks` (a subset of `scores`), with their per-unit values or standard errors."""
        point = np.array([self.scores[b] for b in blocks])
        if self.units is None:
            return BlockScores.from_normal(point, [self.stderr[b] for b in blocks])
        columns = [list(self.scores).index(b) for b in blocks]
        return BlockScores.from_windows(self.units[:, columns], self.weights, point=point)


def angular_input(result: AngularResult) -> ScoredInput:
    """Score an angular result by its adjacent distances (`summary.adjacent`), unmeasured blocks left out."""
    summary = result.summary or result.summarize()
    adjacent = summary["adjacent"]
    scores = {l: d for l, d in enumerate(adjacent) if math.isfinite(d)}
    stderr_list = summary["adjacent_stderr"]
    stderr, fallback = _stderrs(scores, None if stderr_list is None else dict(enumerate(stderr_list)))
    note: str | None = fallback
    units = weights = None
    rows, counts = result.adjacent_windows, result.window_positions
    if rows is None or counts is None:
        note = "no per-window distances (angular.json from before they were recorded); " + fallback
    else:
        table = np.array(rows, dtype=np.float64).reshape(len(rows), result.num_layers)[:, list(scores)]
        why = _unusable(table, np.array(counts, dtype=np.float64), scores, "window")
        if why is None:
            units, weights, note = table, np.array(counts, dtype=np.float64), None
        else:
            note = why + "; " + fallback
    return ScoredInput(
        result.model, ANGULAR_KIND, None, None, None, dict(result.data), scores, units, weights, stderr, note
    )


def prune_drop_input(result: PruneDropResult, path: Path, task: str | None, metric: str | None) -> ScoredInput:
    """Score a prune-drop result by the loss of `metric` on `task` (defaults: the first task, its primary metric).

    Raises:
        LayerprobeError: the file ranks something other than single blocks, or lacks the task or metric.
    """
    unit, span = result.settings.get("unit", "block"), result.settings.get("span", 1)
    if unit != "block" or span != 1:
        raise LayerprobeError(
            f"{path}: a prune-drop of --unit {unit} --span {span} ranks other things than single blocks.",
            hint="stability compares per-block rankings: use a prune-drop run with the default --unit block --span 1.",
        )
    name = _pick(task, result.tasks, path, "task", "--task")
    chosen = result.tasks[name]
    metric_name = _pick(metric, chosen.metrics, path, f"metric of task {name}", "--metric")
    drop = chosen.metrics[metric_name]
    sign = -1.0 if drop.higher_is_better else 1.0
    scores = {l: sign * d for l, d in zip(drop.layers, drop.delta, strict=True) if math.isfinite(d)}
    paired = {l: se for l, se in zip(drop.layers, drop.delta_stderr or [None] * len(drop.layers), strict=True)}
    stderr, fallback = _stderrs(scores, paired, _unpaired(drop))
    units, why = _documents(path, name, metric_name, drop, scores, sign)
    note = None if units is not None else f"{why}; {fallback}"
    data: Record = {
        "num_fewshot": chosen.num_fewshot,
        "limit": chosen.limit,
        "samples": chosen.samples,
        "delta_method": drop.delta_method,
        **({"corpus": result.settings["corpus"]} if "corpus" in result.settings else {}),
    }
    return ScoredInput(
        result.model, PRUNE_DROP_KIND, name, metric_name, drop.higher_is_better, data, scores, units, None, stderr, note
    )


def _pick(asked: str | None, options: Mapping[str, object], path: Path, what: str, flag: str) -> str:
    """The asked name if `options` has it; without one, the first (the only task, or a task's primary metric)."""
    if asked is None:
        return next(iter(options))
    if asked not in options:
        raise LayerprobeError(
            f"{path} has no {what} {asked!r} (it has {', '.join(options)}).",
            hint=f"Pick one of them with {flag}, or leave {flag} out for the first.",
        )
    return asked


def _stderrs(
    scores: dict[int, float],
    given: dict[int, float | None] | None,
    fallback: dict[int, float | None] | None = None,
) -> tuple[dict[int, float], str]:
    """Standard errors for the parametric bootstrap, and the note saying what they are.

    Missing or undefined ones are taken from `fallback` (the unpaired combination), else as 0 (that block's
    score is then treated as exact), and the note says so.
    """
    out: dict[int, float] = {}
    unpaired, exact = [], []
    for block in scores:
        se = None if given is None else given.get(block)
        if (se is None or not math.isfinite(se)) and fallback is not None:
            se = fallback.get(block)
            if se is not None and math.isfinite(se):
                unpaired.append(block)
        if se is None or not math.isfinite(se):
            se = 0.0
            exact.append(block)
        out[block] = se
    note = "parametric bootstrap from the standard errors"
    if unpaired:
        note += f" (unpaired for block(s) {_listed(unpaired)})"
    if exact:
        note += f"; no standard error for block(s) {_listed(exact)}: taken as exact"
    return out, note


def _unpaired(drop: MetricDrop) -> dict[int, float | None]:
    """sqrt(se_pruned² + se_baseline²) per block: the stderr of ΔP ignoring the pairing (older files)."""
    base = drop.baseline_stderr
    return {
        l: None if se is None or base is None else math.hypot(se, base)
        for l, se in zip(drop.layers, drop.stderr, strict=True)
    }


def _unusable(table: np.ndarray, weights: np.ndarray, scores: dict[int, float], unit: str) -> str | None:
    """Why per-unit values cannot stand for the scores (None: they can): too few, non-finite, or not reproducing."""
    if len(table) < 2:
        return f"fewer than 2 {unit}s"
    if not np.isfinite(table).all():
        return f"some {unit}s measured no position of a block (non-finite states)"
    means = weights @ table / weights.sum()
    recorded = np.array(list(scores.values()))
    if not np.allclose(means, recorded, rtol=REPRODUCTION_TOLERANCE, atol=REPRODUCTION_TOLERANCE):
        return f"the per-{unit} values do not reproduce the recorded scores"
    return None


def _documents(
    path: Path, task: str, metric: str, drop: MetricDrop, scores: dict[int, float], sign: float
) -> tuple[np.ndarray | None, str]:
    """Per document (leaf task, doc id), per scored block: sign · (variant − baseline); or None and why not.

    Documents are the rows in the order the baseline's rows list them; each block's variant must hold the
    same documents.
    """
    if drop.delta_method != PAIRED_MEAN:
        return None, f"ΔP of {metric} is not a mean over documents (delta_method {drop.delta_method})"
    sample_file = RunDir(path.parent).sample_file(task)
    if not sample_file.is_file():
        return None, f"no per-document values ({sample_file} is missing: run prune-drop with --log-samples)"
    by_variant: dict[int | None, dict[tuple[str, str], float]] = {}
    for number, row in enumerate(read_json_lines(sample_file), start=1):
        node = Node(row, f"{sample_file}:{number}")
        if metric not in row:
            continue
        variant = node.key("variant").integer(optional=True, minimum=0)
        value = node.key(metric).value
        if not isinstance(value, (int, float)):  # bools too (lm-eval's acc can be one)
            return None, f"the per-document values of {metric} are not numbers"
        doc = (node.key("task").text(), repr(node.key("doc_id").value))
        by_variant.setdefault(variant, {})[doc] = float(value)
    base = by_variant.get(None)
    if not base:
        return None, f"{sample_file} holds no baseline values of {metric}"
    docs = list(base)  # in the order the baseline's rows list them
    columns = []
    for block in scores:
        values = by_variant.get(block)
        if values is None or values.keys() != base.keys():
            return None, f"{sample_file} does not pair block {block}'s documents with the baseline's"
        columns.append([sign * (values[d] - base[d]) for d in docs])
    table = np.array(columns, dtype=np.float64).T.reshape(len(docs), len(scores))
    why = _unusable(table, np.ones(len(docs)), scores, "document")
    return (table, "") if why is None else (None, why)


def _listed(blocks: list[int]) -> str:
    return ", ".join(map(str, blocks[:8])) + (", …" if len(blocks) > 8 else "")
