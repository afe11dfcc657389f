"""`layerprobe stability`: how much the block ranking, and the set chosen for removal, depend on the data.

Two or more angular.json / prune_drop.json of one model (different corpora, seeds, chat-templated text,
tasks) each rank the blocks from most to least prunable (stability_inputs.py). For every pair of inputs
this computes Kendall's τ-b and Spearman's ρ of the two rankings and the Jaccard overlap of their k most
prunable blocks, k = 1 … ⌊n/2⌋, each with a bootstrap 95 % interval that resamples the windows (angular)
or documents (prune-drop) each input was measured on (stats/ranking.py). Results of different models
are refused: one model is the same architecture and block count, and the same model id or the same
weights fingerprint (model/fingerprint.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from layerprobe.core import LayerprobeError
from layerprobe.results import (
    AngularResult,
    DepthResult,
    PruneDropResult,
    RunTimer,
    StabilityInput,
    StabilityPair,
    StabilityResult,
    load_result,
)
from layerprobe.review.stability_inputs import ScoredInput, angular_input, prune_drop_input
from layerprobe.stats import DEFAULT_DRAWS, DEFAULT_SEED, lowest_k_jaccard_chance, ranking_stability

CONFIDENCE = 0.95
# Loading options that may differ between inputs of one model; a difference is noted, not refused.
NOTED_MODEL_FIELDS = ("revision", "commit", "dtype", "quantization", "attn_implementation")
Ranked = AngularResult | PruneDropResult


def stability(
    paths: Sequence[str | Path],
    *,
    task: str | None = None,
    metric: str | None = None,
    draws: int = DEFAULT_DRAWS,
    seed: int = DEFAULT_SEED,
) -> StabilityResult:
    """Compare the block rankings of two or more results of one model, pair by pair.

    Args:
        paths: angular.json and/or prune_drop.json files, mixed kinds allowed.
        task: The prune-drop task to rank by where a file has several (default: its first).
        metric: The metric whose ΔP is ranked (default: the task's primary metric).
        draws: Bootstrap draws per pair (≥ 2).
        seed: Seed of the draws.

    Raises:
        LayerprobeError: fewer than two files, a file of another kind, results of different models, a
            missing task or metric, or fewer than two blocks scored by every input.
        ResultError: a file is missing or not a valid result.
    """
    timer = RunTimer()
    files = [Path(p) for p in paths]
    if len(files) < 2:
        raise LayerprobeError(
            f"stability compares two or more results; got {len(files)}.",
            hint="Pass the angular.json / prune_drop.json of runs on different data, e.g. runs/*/angular.json.",
        )
    if draws < 2:
        raise LayerprobeError(f"--draws must be at least 2, got {draws}.")
    results = [(path, _ranked(path)) for path in files]
    check_one_model(results)
    scored = [
        angular_input(result) if isinstance(result, AngularResult) else prune_drop_input(result, path, task, metric)
        for path, result in results
    ]
    blocks = sorted(set.intersection(*(set(s.scores) for s in scored)))
    if len(blocks) < 2:
        raise LayerprobeError(
            f"The inputs score only {len(blocks)} block(s) in common; a ranking needs at least 2.",
            hint="Compare results that evaluated the same blocks (prune-drop --layers) with finite scores.",
        )
    sides = [s.block_scores(blocks) for s in scored]
    pairs = []
    for i in range(len(sides)):
        for j in range(i + 1, len(sides)):
            found = ranking_stability(sides[i], sides[j], draws=draws, seed=seed)
            pairs.append(
                StabilityPair(
                    first=i,
                    second=j,
                    kendall_tau_b=found.tau,
                    spearman_rho=found.rho,
                    jaccard_lowest_k=list(found.jaccard),
                    kendall_tau_b_ci95=None if found.tau_ci is None else list(found.tau_ci),
                    spearman_rho_ci95=None if found.rho_ci is None else list(found.rho_ci),
                    jaccard_lowest_k_ci95=[list(ci) for ci in found.jaccard_ci],
                    method=found.method,
                )
            )
    labels = unique_labels(files)
    inputs = [_input(path, label, s, blocks) for path, label, s in zip(files, labels, scored, strict=True)]
    return StabilityResult(
        model=results[0][1].model,
        settings={"draws": draws, "seed": seed, "confidence": CONFIDENCE, "task": task, "metric": metric},
        blocks=blocks,
        jaccard_chance=list(lowest_k_jaccard_chance(len(blocks))),
        inputs=inputs,
        pairs=pairs,
        notes=_notes(results, scored, labels, blocks),
        run=timer.finish("cpu"),
    )


def _ranked(path: Path) -> Ranked:
    """The file as an angular or prune-drop result; any other kind is refused in one line."""
    result = load_result(path)
    if not isinstance(result, AngularResult | PruneDropResult):
        kind = "depth" if isinstance(result, DepthResult) else "pruning-curve"
        raise LayerprobeError(
            f"{path} is a {kind} result; stability ranks blocks by angular.json or prune_drop.json.",
            hint="Pass angular.json or prune_drop.json files.",
        )
    return result


def check_one_model(results: Sequence[tuple[Path, Ranked]]) -> None:
    """Refuse results of different models, in one line: another architecture, block count, or checkpoint.

    One checkpoint is the same model id, or (a copy under another name) the same weights fingerprint.
    """
    first_path, first = results[0]
    a = first.model
    for path, result in results[1:]:
        b = result.model
        differs = None
        if b.architecture != a.architecture:
            differs = f"{a.architecture} vs {b.architecture}"
        elif b.num_layers != a.num_layers:
            differs = f"{a.num_layers} vs {b.num_layers} blocks"
        elif b.id != a.id and (a.weights_fingerprint is None or a.weights_fingerprint != b.weights_fingerprint):
            fingerprints = (
                "their weights fingerprints differ"
                if a.weights_fingerprint and b.weights_fingerprint
                else "no weights fingerprint shows they are the same checkpoint"
            )
            differs = f"{a.id} vs {b.id}, and {fingerprints}"
        if differs:
            raise LayerprobeError(
                f"{first_path} and {path} are results of different models ({differs}); stability compares "
                "rankings of one model.",
                hint="One model: the same architecture and block count, and the same model id or weights fingerprint.",
            )


def unique_labels(paths: Sequence[Path]) -> list[str]:
    """Short names for the inputs: each file's directory name, with more of the path (then `#i`) where two agree.

    `runs/c4/angular.json` is `c4`; two files of one directory are `c4/angular` and `c4/prune_drop`.
    """
    resolved = [path.resolve() for path in paths]
    namings = (
        lambda p: p.parent.name,
        lambda p: f"{p.parent.name}/{p.stem}",
        lambda p: f"{p.parent.parent.name}/{p.parent.name}/{p.stem}",
    )
    labels: list[str] = []
    for naming in namings:
        labels = [naming(p) for p in resolved]
        if all(labels) and len(set(labels)) == len(labels):
            return labels
    return [f"{label}#{i + 1}" for i, label in enumerate(labels)]


def _input(path: Path, label: str, scored: ScoredInput, blocks: list[int]) -> StabilityInput:
    scores = [scored.scores[b] for b in blocks]
    return StabilityInput(
        path=str(path),
        label=label,
        kind=scored.kind,
        model_id=scored.model.id,
        weights_fingerprint=scored.model.weights_fingerprint,
        task=scored.task,
        metric=scored.metric,
        higher_is_better=scored.higher_is_better,
        data=scored.data,
        scores=scores,
        ranking=[b for _, b in sorted(zip(scores, blocks, strict=True))],
        resampled=scored.resampled,
        units=None if scored.units is None else len(scored.units),
        note=scored.note,
    )


def _notes(
    results: Sequence[tuple[Path, Ranked]], scored: Sequence[ScoredInput], labels: list[str], blocks: list[int]
) -> list[str]:
    """What a reader must know: fallbacks, blocks some input did not score, loading options that differ."""
    notes = [f"{label}: {s.note}" for label, s in zip(labels, scored, strict=True) if s.note]
    for label, s in zip(labels, scored, strict=True):
        values = [s.scores[b] for b in blocks]
        if len(set(values)) == 1:
            notes.append(
                f"{label}: all {len(blocks)} blocks score the same: τ and ρ with it are undefined, and its lowest-k "
                "sets are the first blocks by index"
            )
        elif len(set(values)) < len(values):
            tied = sorted(b for b, value in zip(blocks, values, strict=True) if values.count(value) > 1)
            notes.append(f"{label}: block(s) {', '.join(map(str, tied))} tie: the lower block ranks first")
    for label, s in zip(labels, scored, strict=True):
        left_out = sorted(set(range(s.model.num_layers)) - set(blocks))
        missing = [b for b in left_out if b not in s.scores]
        if missing:
            notes.append(f"{label}: block(s) {', '.join(map(str, missing))} not scored (or not finite): left out")
    for field in NOTED_MODEL_FIELDS:
        values = [getattr(result.model, field) for _, result in results]
        if len(set(values)) > 1:
            shown = ", ".join(f"{label}: {value}" for label, value in zip(labels, values, strict=True))
            notes.append(f"the inputs differ in {field} ({shown})")
    return notes
