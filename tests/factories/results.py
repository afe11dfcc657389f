"""Result objects with hand-picked numbers (no model): what `compare`, `plot` and the readers are fed.

Every result the tests build without running a model comes from here, so a test states only what it
varies: the adjacent distances of an angular result, the pruned scores of a metric, a JSON path to break.
"""

from __future__ import annotations

import copy
import math
from dataclasses import asdict, replace

import numpy as np

from layerprobe.results import (
    AngularResult,
    AnswerFlips,
    BlockPlacement,
    CurveMethod,
    CurveMetric,
    DepthResult,
    Evaluation,
    GradNorms,
    HealResult,
    MetricDrop,
    MetricScore,
    ModelInfo,
    Placement,
    PruneCurveResult,
    PruneDropResult,
    PruneProgress,
    PruneShard,
    RunInfo,
    Spread,
    TaskDrop,
    checksum,
    curves_to_v1,
    evaluation_to_dict,
)

RUN = RunInfo(started_at="2025-01-01T00:00:00+00:00", seconds=1.0, versions={"layerprobe": "0"}, device="cpu")


def model_info(num_layers: int = 4, **fields: object) -> ModelInfo:
    """A LLaMA-like ModelInfo with `num_layers` blocks; `fields` override any other field."""
    values: dict[str, object] = dict(
        id="org/m",
        revision=None,
        commit=None,
        architecture="LlamaForCausalLM",
        model_type="llama",
        kind="causal-lm",
        dtype="float32",
        num_layers=num_layers,
        layer_path="layers",
        block_class="Block",
    )
    return ModelInfo(**{**values, **fields})


def gate_model(num_layers: int, model_id: str = "org/base") -> ModelInfo:
    """The model of the gate's results: a pinned revision, the stack path of a head model."""
    return model_info(
        num_layers, id=model_id, revision="main", layer_path="model.layers", block_class="LlamaDecoderLayer"
    )


# ------------------------------------------------------------------------------------------- angular
def distance_matrix(adjacent: list[float]) -> list[list[float]]:
    """A symmetric (L+1)×(L+1) matrix whose first off-diagonal is exactly `adjacent` (farther: sums, ≤ 1)."""
    size = len(adjacent) + 1
    matrix = [[0.0] * size for _ in range(size)]
    for i in range(size):
        for j in range(i + 1, size):
            total = sum(adjacent[i:j])
            matrix[i][j] = matrix[j][i] = total if math.isnan(total) else min(1.0, total)
    return matrix


def banded_distances(num_layers: int, low: dict[tuple[int, int], float]) -> list[list[float]]:
    """A symmetric (L+1)² matrix: d = 0.5 + 0.1·|i−j| except the given (i, j) entries."""
    m = [[0.0 if i == j else 0.5 + 0.1 * abs(i - j) for j in range(num_layers + 1)] for i in range(num_layers + 1)]
    for (i, j), value in low.items():
        m[i][j] = m[j][i] = value
    return m


def walk_distances(num_layers: int, seed: int, nan_cells=()) -> list[list[float]]:
    """Angular distances between the states of a random walk whose steps shrink with depth."""
    rng = np.random.default_rng(seed)
    states = [rng.normal(size=32)]
    for layer in range(num_layers):
        states.append(states[-1] + rng.normal(size=32) * np.linalg.norm(states[-1]) / (4 + layer))
    unit = np.array([s / np.linalg.norm(s) for s in states])
    matrix = (np.arccos(np.clip(unit @ unit.T, -1.0, 1.0)) / math.pi).tolist()
    for i, j in nan_cells:
        matrix[i][j] = matrix[j][i] = float("nan")
    return matrix


def angular_from_adjacent(
    adjacent: list[float], model_id: str = "org/base", summary=None, stderr: float | None = None, **data
) -> AngularResult:
    """An angular result whose adjacent distances are `adjacent`.

    With `stderr`, every off-diagonal entry gets that standard error (None: a file from before stderrs).
    """
    size = len(adjacent) + 1
    errors = None if stderr is None else [[0.0 if i == j else stderr for j in range(size)] for i in range(size)]
    return AngularResult(
        model=gate_model(len(adjacent), model_id),
        data={"dataset": "allenai/c4", "positions": "all", "tokens": 4096, **data},
        distance=distance_matrix(adjacent),
        nonfinite_tokens=0,
        run=RUN,
        tokens_per_second=1.0,
        summary=summary or {},
        distance_stderr=errors,
    )


def angular_from_walk(
    num_layers: int, seed: int = 0, nan_cells=(), model_id="org/tiny-model", stderr: float | None = None
) -> AngularResult:
    """An angular result of `walk_distances`; with `stderr`, entries get errors of about that size (varying)."""
    distance = walk_distances(num_layers, seed, nan_cells)
    errors = None
    if stderr is not None:
        rng = np.random.default_rng(seed + 1)
        errors = (stderr * rng.uniform(0.5, 1.5, size=(num_layers + 1, num_layers + 1))).tolist()
    return AngularResult(
        model=model_info(num_layers, id=model_id, layer_path="model.layers", block_class="LlamaDecoderLayer"),
        data={"tokens": 4096, "positions": "all", "positions_averaged": 4000},
        distance=distance,
        nonfinite_tokens=3,
        run=RUN,
        tokens_per_second=100.0,
        distance_stderr=errors,
    )


# ---------------------------------------------------------------------------------------- prune-drop
def metric_drop(
    baseline: float,
    pruned: list[float],
    stderr=0.01,
    baseline_stderr=0.01,
    hib=True,
    layers=None,
    paired_se=None,
    **fields,
) -> MetricDrop:
    """One metric's drop over layers 0… (or `layers`); `stderr` one number or one per layer.

    With `paired_se` (one per layer, None allowed), the paired fields a current file holds: ΔP stderrs,
    their 95 % intervals and significance. `fields` set any other MetricDrop field.
    """
    stderrs = stderr if isinstance(stderr, list) else [stderr] * len(pruned)
    if paired_se is not None:
        deltas = [p - baseline for p in pruned]
        fields = {
            "delta_stderr": list(paired_se),
            "delta_ci95": [
                None if s is None else [d - 1.96 * s, d + 1.96 * s] for d, s in zip(deltas, paired_se, strict=True)
            ],
            "significant": [None if s is None else abs(d) > 1.96 * s for d, s in zip(deltas, paired_se, strict=True)],
            "delta_method": "paired_mean",
            **fields,
        }
    return MetricDrop(
        baseline=baseline,
        baseline_stderr=baseline_stderr,
        higher_is_better=hib,
        layers=layers if layers is not None else list(range(len(pruned))),
        pruned=list(pruned),
        stderr=stderrs,
        **fields,
    )


def random_metric_drop(num_layers: int, seed: int = 0, higher_is_better: bool = True) -> MetricDrop:
    """Pruned scores around 0.5, one NaN in the middle, a stderr missing on every third layer."""
    rng = np.random.default_rng(seed)
    pruned = [0.5 + float(rng.normal(0.0, 0.05)) for _ in range(num_layers)]
    pruned[num_layers // 2] = float("nan")
    stderr = [None if layer % 3 == 0 else 0.01 for layer in range(num_layers)]
    return metric_drop(0.5, pruned, stderr=stderr, baseline_stderr=0.02, hib=higher_is_better)


def prune_drop_result(
    metrics_by_task: dict[str, dict[str, MetricDrop]],
    num_layers: int = 4,
    model_id: str = "org/base",
    limit=100,
    *,
    model: ModelInfo | None = None,
    settings: dict | None = None,
    engine: str = "simple",
    run: RunInfo = RUN,
    **task_fields,
) -> PruneDropResult:
    """A prune-drop result of these tasks' metrics (100 documents each, zero-shot unless `task_fields` say)."""
    task_fields = {"num_fewshot": 0, **task_fields}
    tasks = {name: TaskDrop(metrics=m, limit=limit, samples=100, **task_fields) for name, m in metrics_by_task.items()}
    model = model if model is not None else gate_model(num_layers, model_id)
    return PruneDropResult(model=model, engine=engine, settings=settings or {}, tasks=tasks, run=run)


def random_prune_result(num_layers: int, tasks=("arc_easy",), seed=0, higher_is_better=True) -> PruneDropResult:
    """Random `acc` and `acc_norm` drops for each task."""
    metrics = {
        name: {
            "acc": random_metric_drop(num_layers, seed + k, higher_is_better),
            "acc_norm": random_metric_drop(num_layers, seed + 100 + k),
        }
        for k, name in enumerate(tasks)
    }
    model = model_info(num_layers, id="org/tiny-model", layer_path="model.layers", block_class="LlamaDecoderLayer")
    return prune_drop_result(metrics, num_layers, limit=None, model=model)


# ------------------------------------------------------------------------ whole files, as JSON objects
def angular_dict() -> dict:
    """A valid angular.json of a 3-block model."""
    distance = [[0.0, 0.1, 0.3, 0.5], [0.1, 0.0, 0.2, 0.4], [0.3, 0.2, 0.0, 0.2], [0.5, 0.4, 0.2, 0.0]]
    data = {"dataset": "builtin:pydoc", "tokens": 64, "seq_len": 32, "positions": "all", "positions_averaged": 64}
    return AngularResult(model_info(3), data, distance, 0, RUN, 10.0).to_dict()


def prune_dict() -> dict:
    """A valid prune_drop.json of a 3-block model, one task, one metric."""
    metric = metric_drop(0.5, [0.2, 0.45, 0.5], stderr=0.05, baseline_stderr=0.05)
    return prune_drop_result(
        {"arc": {"acc": metric}}, limit=None, model=model_info(3), settings={"limit": None}
    ).to_dict()


def depth_dict() -> dict:
    """A valid depth.json of a 2-block model, with gradients and one sublayer."""

    def spread(n: int) -> Spread:
        return Spread([1.0] * n, [0.1] * n, [0.5] * n, [2.0] * n, [8] * n)

    blocks = [BlockPlacement(0, "Pre-LN", {"ln": "LayerNorm"}), BlockPlacement(1, "Pre-LN")]
    model = model_info(2, architecture="X", model_type="x")
    sublayers = {"attention": {"modules": ["a0", "a1"], "relative": spread(2)}}
    grad = GradNorms("next-token", 2.5, 64, [0.1, 0.2], None)
    data = {"dataset": "builtin:pydoc", "tokens": 64, "positions": "all", "positions_averaged": 64}
    placement = Placement(blocks, "Pre-LN", "Pre-LN throughout")
    result = DepthResult(model, data, placement, spread(3), spread(3), spread(2), sublayers, grad, 0, RUN)
    return result.to_dict()


def curve_result() -> PruneCurveResult:
    """A pruning curve of a 4-block model: the corpus NLL, chosen by angular and by "last" (spans only)."""
    angular = CurveMethod([1, 2], [2, 1], [3.1, 3.5], [0.1, 0.1], [0.1, 0.5], [0.05, None])
    last = CurveMethod([1, 2], [2, 1], [3.2, 3.6], [0.1, None], [0.2, 0.6], [0.05, 0.06])
    nll = CurveMetric(3.0, 0.1, False, {"angular": angular, "last": last})
    selection = {"n": [1, 2], "start": [2, 1], "distance": [0.1, 0.2]}
    settings = {"tasks": ["corpus"], "max_fraction": 0.5}
    return PruneCurveResult.from_curves(model_info(4), settings, selection, {"corpus": {"nll": nll}}, RUN)


def curve_result_with_flips() -> PruneCurveResult:
    """`curve_result` with the answers changed per set, as a generating task records them (two filters).

    Set n of method k (0, 1) changed n + k of 8 strict answers and n + k + 1 of 8 flexible ones.
    """
    result = curve_result()
    methods = {}
    for k, (name, strategy) in enumerate(result.methods.items()):
        sets = {}
        for n, chosen in strategy.sets.items():
            counts = {"strict-match": n + k, "flexible-extract": n + k + 1}
            flips = {
                f: AnswerFlips(c, 8, c / 8, [max(0.0, c / 8 - 0.2), min(1.0, c / 8 + 0.2)]) for f, c in counts.items()
            }
            sets[n] = replace(chosen, flip_rate={"corpus": flips})
        methods[name] = replace(strategy, sets=sets)
    return replace(result, methods=methods)


def curve_result_sequential() -> PruneCurveResult:
    """`curve_result` as a sequential run (`--precision 0.2 --round-size 4`) records it: each set's stop.

    Set n of method k stopped after 4 (n + k) documents, its anytime interval ΔP ± 0.2 · n; the full model
    was scored on 12 documents.
    """
    result = curve_result()
    methods = {}
    for k, (name, strategy) in enumerate(result.methods.items()):
        sets = {}
        for n, chosen in strategy.sets.items():
            score = chosen.scores["corpus"]["nll"]
            bounds = [score.delta - 0.2 * n, score.delta + 0.2 * n]
            stopped = replace(score, items=4 * (n + k), stop="precision" if n == 1 else "settled", delta_cs95=bounds)
            sets[n] = replace(chosen, scores={"corpus": {"nll": stopped}})
        methods[name] = replace(strategy, sets=sets)
    baseline = {"corpus": {"nll": replace(result.baseline["corpus"]["nll"], items=12)}}
    settings = {**result.settings, "precision": 0.2, "round_size": 4}
    return replace(result, methods=methods, baseline=baseline, settings=settings)


def curve_dict() -> dict:
    """A valid prune_curve.json in the older `layerprobe/prune-curve@1` form (per task, metric and method)."""
    return curves_to_v1(curve_result())


def curve_dict_v2() -> dict:
    """The same curve as `curve_dict`, as written now (`layerprobe/prune-curve@2`: per method, its sets)."""
    return curve_result().to_dict()


def curve_sets_dict(sets: dict, num_layers: int = 6, model_id: str = "org/m") -> dict:
    """A prune_curve.json of schema @2 reduced to what `prune --from` reads: the model and each method's sets.

    `sets`: {method: {n: {"blocks": [...], "sublayers": [[block, "attention" | "mlp"], ...]}}}, keys as given.
    """
    methods = {name: {"sets": {str(n): chosen for n, chosen in by_n.items()}} for name, by_n in sets.items()}
    model = asdict(model_info(num_layers, id=model_id))
    return {"schema": "layerprobe/prune-curve@2", "model": model, "methods": methods}


def evaluation_dict() -> dict:
    """A fresh evaluation entry (never shared: `edited` deep-copies, and a deep copy keeps shared objects shared)."""
    return evaluation_to_dict(Evaluation({"acc": MetricScore(0.5, 0.05, True, 10)}, 0, 10, "simple"))


def shard_dict() -> dict:
    """A valid shard 0/2 of a 2-block run: the baseline and block 0 of task arc."""
    settings = {"tasks": ["arc"], "layers": [0, 1], "limit": None}
    rows = {"arc": [{"variant": None, "task": "arc", "doc_id": 0, "acc": 1.0}]}
    done = {"arc": {"baseline": evaluation_dict(), "0": evaluation_dict()}}
    shard = PruneShard(
        "0/2", {"model": "org/m"}, model_info(2), settings, ["arc"], [0, 1], ["baseline", "0"], done, rows, None, RUN
    )
    return shard.to_dict()


def partial_dict() -> dict:
    """A valid progress file (--resume) with the baseline and block 1 of task arc done (no per-document rows)."""
    done = {"arc": {"baseline": evaluation_dict(), "1": evaluation_dict()}}
    check = {"record": checksum(evaluation_dict()), "rows": checksum([])}
    return PruneProgress({"model": "m"}, done, {"arc": {"baseline": dict(check), "1": dict(check)}}).to_dict()


def edited(data: dict, path: str, value) -> dict:
    """A copy of `data` with `value` at a dotted path (`tasks.arc.metrics.acc.baseline`; `distance.1` indexes)."""
    data = copy.deepcopy(data)
    *parents, last = path.split(".")
    node = data
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return data


def acc_drop(pruned, paired_se=None, own_se=0.05, baseline=0.70) -> MetricDrop:
    """acc over len(pruned) layers with its own stderrs; with `paired_se`, a current file's paired ΔP fields."""
    return metric_drop(baseline, pruned, stderr=own_se, baseline_stderr=own_se, paired_se=paired_se)


def arc_result(metric: MetricDrop) -> PruneDropResult:
    """A prune-drop result of a 4-block model: one task, `arc`, with one metric, `acc`."""
    return prune_drop_result({"arc": {"acc": metric}}, limit=None, model=model_info(4, revision="main"))


def arc_acc_result(baseline: float, version: str | None = "1.0", limit=None, num_fewshot=0) -> PruneDropResult:
    """A 3-block result of task `arc` whose acc falls by 0.1 without any block; lm-eval's task version kept."""
    metric = metric_drop(baseline, [baseline - 0.1] * 3)
    return prune_drop_result(
        {"arc": {"acc": metric}}, 3, limit=limit, num_fewshot=num_fewshot, version=version, settings={"seed": 1234}
    )


def paired_arc_result(higher_is_better=True, agreement=False) -> tuple[PruneDropResult, MetricDrop]:
    """A result whose acc has paired 95 % intervals (two excluding 0), and with `agreement` an angular
    comparison of it; returned with that metric."""
    from layerprobe.prune.agreement import metric_agreement

    deltas = [-0.30, -0.02, 0.04, 0.10]
    intervals = [[-0.40, -0.20], [-0.06, 0.02], [-0.01, 0.09], [0.05, 0.15]]
    metric = metric_drop(
        0.5,
        [0.5 + d for d in deltas],
        stderr=0.05,
        baseline_stderr=0.05,
        hib=higher_is_better,
        delta_stderr=[0.05, 0.02, 0.025, 0.025],
        delta_ci95=intervals,
        significant=[True, False, False, True],
        delta_method="paired_mean",
    )
    block = {"acc": metric_agreement([0.4, 0.1, 0.2, 0.3], metric)} if agreement else None
    return prune_drop_result({"arc": {"acc": metric}}, limit=None, model=model_info(4), agreement=block), metric


def corpus_prune_result() -> PruneDropResult:
    """A `--task corpus` result of a 4-block model: NLL (primary), perplexity, KL and top-1 agreement, paired."""
    se = [0.01, 0.02, 0.01, 0.03]
    metrics = {
        "nll": metric_drop(2.0, [2.5, 2.1, 2.05, 3.0], hib=False, paired_se=se),
        "perplexity": metric_drop(7.39, [12.2, 8.2, 7.8, 20.1], hib=False, paired_se=se),
        "kl": metric_drop(0.0, [0.40, 0.08, 0.03, 0.9], hib=False, baseline_stderr=0.0, paired_se=se),
        "top1_agreement": metric_drop(1.0, [0.70, 0.93, 0.97, 0.52], baseline_stderr=0.0, paired_se=se),
    }
    return prune_drop_result({"corpus": metrics}, 4, limit=None)


def heal_result(shift: float = 0.0, method: str = "linear", seed: int = 0, windows: int = 12) -> HealResult:
    """A heal.json's result from made-up per-window values: the healed model `shift` worse than the built one."""
    from layerprobe.heal.held_out import summarise

    rng = np.random.default_rng(seed)
    nll = rng.normal(3.0, 0.2, windows)
    values = {
        "original": {"nll": list(nll), "kl": [0.0] * windows, "top1_agreement": [1.0] * windows},
        "pruned": {
            "nll": list(nll + 0.5 + rng.normal(0, 0.05, windows)),
            "kl": list(0.5 + rng.normal(0, 0.05, windows)),
            "top1_agreement": list(0.6 + rng.normal(0, 0.02, windows)),
        },
        "healed": {
            "nll": list(nll + 0.1 + shift + rng.normal(0, 0.02, windows)),
            "kl": list(0.1 + shift + rng.normal(0, 0.02, windows)),
            "top1_agreement": list(0.9 - shift + rng.normal(0, 0.01, windows)),
        },
    }
    return HealResult(
        model=model_info(4),
        method=method,
        removed=[2],
        spans=[[2, 3]],
        ridge=0.0,
        fits=[],
        data={"dataset": "builtin:pydoc", "tokens": 512, "seq_len": 64},
        metrics=summarise(values),
        parameters={"original": 1000, "healed": 800},
        checkpoint=None,
        fit_seconds=0.5,
        run=RUN,
    )
