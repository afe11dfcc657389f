"""`lp.prune_drop`, `lp.compare` and `lp.stability`: the experiments and the readers, on live models and results.

`prune_drop` scores the model with each block taken out in memory (the `prune-drop` command's library call,
given the live model instead of loading it) and writes prune_drop.json into `out`, as the command does.
`compare` and `stability` take result objects or files alike: a result object is what the API returned
(or `load_result` read), a path what the CLI wrote.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from layerprobe.api.arguments import model_spec
from layerprobe.api.faces import Comparison
from layerprobe.api.measure import without_fingerprint
from layerprobe.core import DEFAULT_DRAWS, DEFAULT_SEED, LayerprobeError, PruneSpec
from layerprobe.gate import GateRules, compare_paths, compare_results
from layerprobe.model import Progress, is_live_model, live_model, untouched
from layerprobe.prune import run_prune_drop
from layerprobe.results import AngularResult, DepthResult, PruneDropResult, RunDir, StabilityResult, write_json
from layerprobe.review import stability as review_stability

Result = AngularResult | PruneDropResult | DepthResult


def prune_drop(
    model: Any,
    tokenizer: Any = None,
    *,
    tasks: str | Sequence[str],
    out: str | os.PathLike[str],
    layers: str | None = PruneSpec.layers,
    limit: float | None = PruneSpec.limit,
    num_fewshot: int | None = PruneSpec.num_fewshot,
    batch_size: int | str = PruneSpec.batch_size,
    seed: int = PruneSpec.seed,
    include_path: str | None = PruneSpec.include_path,
    engine: str = PruneSpec.engine,
    unit: str = PruneSpec.unit,
    span: int = PruneSpec.span,
    resume: bool = False,
    progress: Progress | None = None,
    **loading_options: Any,
) -> PruneDropResult | None:
    """ΔP of each block removed, as `layerprobe prune-drop` scores it; writes prune_drop.json into `out`.

    `model`: a live causal LM (with `tokenizer`) or a hub id / checkpoint directory; `tasks`: lm-eval task
    names (or YAML paths). The other keywords are the command's options of the same names.

    Example:
        >>> result = lp.prune_drop(model, tokenizer, tasks=["arc_easy"], limit=100, out="runs/drop")
    """
    spec = PruneSpec(
        model=model_spec(model, tokenizer, loading_options),
        tasks=(tasks,) if isinstance(tasks, str) else tuple(tasks),
        layers=layers,
        limit=limit,
        num_fewshot=num_fewshot,
        batch_size=batch_size,
        seed=seed,
        include_path=include_path,
        engine=engine,
        unit=unit,
        span=span,
    )
    if not is_live_model(model):
        return run_prune_drop(spec, Path(out), resume=resume, progress=progress)
    with untouched(model):
        loaded = live_model(model, tokenizer, spec.model, head=True)
        result = run_prune_drop(spec, Path(out), resume=resume, progress=progress, loaded=loaded)
    return None if result is None else without_fingerprint(result)


def compare(
    baseline: Result | str | os.PathLike[str],
    candidate: Result | str | os.PathLike[str],
    rules: GateRules | None = None,
) -> Comparison:
    """The `compare` gate's verdict on two results (objects, files, or run directories); `.passed` is CI's answer.

    The verdict is a `Comparison` (the gate's `Verdict` with a result's notebook face): `.save(dir)` writes
    compare.json (what `compare --format json` prints) and the figure `compare` draws.

    Example:
        >>> verdict = lp.compare("runs/base/angular.json", candidate_result)
        >>> verdict.passed
    """
    rules = rules or GateRules()
    if isinstance(baseline, (str, os.PathLike)) and isinstance(candidate, (str, os.PathLike)):
        return Comparison.of(compare_paths(Path(baseline), Path(candidate), rules))
    left, right = (_as_result(baseline), _as_result(candidate))
    return Comparison(Path("baseline"), Path("candidate"), rules, [compare_results(left, right, rules)], [])


def stability(
    results: Sequence[Result | str | os.PathLike[str]],
    *,
    task: str | None = None,
    metric: str | None = None,
    draws: int = DEFAULT_DRAWS,
    seed: int = DEFAULT_SEED,
) -> StabilityResult:
    """How the block ranking depends on the calibration data, as `layerprobe stability` reports it.

    `results`: two or more angular / prune-drop results of one model (objects or files).

    Example:
        >>> lp.stability([lp.angular(model, tok, "builtin:pydoc"), lp.angular(model, tok, texts)])
    """
    with tempfile.TemporaryDirectory(prefix="layerprobe-stability-") as scratch:
        paths = []
        for index, item in enumerate(results):
            if isinstance(item, (str, os.PathLike)):
                paths.append(Path(item))
                continue
            run = RunDir(Path(scratch) / str(index))
            result = _as_result(item)
            target = run.prune_drop_json if isinstance(result, PruneDropResult) else result.run_file(run)
            target.parent.mkdir(parents=True)
            paths.append(write_json(target, result.to_dict()))
        return review_stability(paths, task=task, metric=metric, draws=draws, seed=seed)


def _as_result(value: object) -> Result:
    if isinstance(value, (AngularResult, PruneDropResult, DepthResult)):
        return value
    raise LayerprobeError(
        f"Expected a layerprobe result (or a path), got a {type(value).__name__}.",
        hint="Pass what lp.angular / lp.depth / lp.prune_drop returned, or the path of a result file.",
    )
