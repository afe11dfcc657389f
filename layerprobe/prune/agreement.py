"""Do the two measures of a block's importance agree? Angular distance d(x^l, x^(l+1)) against ΔP(l).

A block that barely turns its input (small adjacent angular distance) should cost little when removed.
Given an angular result of the same model, each prune-drop metric gets a rank agreement: Spearman's rho
between d(x^l, x^(l+1)) and ΔP(l) over the removed blocks, with a 95 % interval (Fisher's z, Bonett and
Wright's standard error: it always holds ρ) and how many distinct values each side has (with fewer than
4, ρ is a handful of tied ranks and says little), and the overlap of the k blocks each measure calls most
redundant (smallest distance; smallest loss).

Orientation: for a metric where higher is better, removing an important block makes ΔP negative, so
the measures agree when rho is *negative*; for perplexity-like metrics when it is positive.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from layerprobe.core import ResultError
from layerprobe.results import AngularResult, MetricDrop, ModelInfo, RunDir, load_result
from layerprobe.stats import INFORMATIVE_DISTINCT, distinct_values, spearman_interval, top_k_overlap


@dataclass(frozen=True)
class AngularSource:
    """An angular result to compare ΔP with, and the file it was read from (each agreement block names it)."""

    path: Path
    result: AngularResult


def find_angular(explicit: str | Path | None, out_dir: Path) -> Path | None:
    """The angular result to compare with: the one given, else an angular.json in the same --out, else None."""
    if explicit is not None:
        return Path(explicit)
    found = RunDir(out_dir).angular_json
    return found if found.is_file() else None


def load_angular_for(path: Path, num_layers: int | None) -> AngularResult:
    """Read `path` and check it measured a model with `num_layers` blocks (None: not known yet)."""
    result = load_result(path)
    if not isinstance(result, AngularResult):
        raise ResultError(f"{path} is not an angular result.", hint="Pass the angular.json of the same model.")
    check_angular_fits(result, path, num_layers)
    return result


def check_angular_fits(result: AngularResult, path: Path, num_layers: int | None) -> None:
    """Refuse an angular result of a model with another number of blocks."""
    if num_layers is not None and result.num_layers != num_layers:
        raise ResultError(
            f"{path} measured {result.num_layers} blocks; this model has {num_layers}.",
            hint="Pass the angular.json of the same model (layerprobe angular MODEL --out DIR).",
        )


def angular_model_mismatch(measured: ModelInfo, info: ModelInfo) -> str | None:
    """Why an angular result of `measured` is not one of the model `info` describes (None: it is the same model).

    The same weights fingerprint is the same model whatever its id (a hub download and its local copy);
    different fingerprints are different weights. Where either file lacks a fingerprint, the model id
    decides. The architecture and the block count must match in every case.
    """
    reasons = []
    if measured.num_layers != info.num_layers:
        reasons.append(f"{measured.num_layers} blocks, this model {info.num_layers}")
    if measured.architecture != info.architecture:
        reasons.append(f"architecture {measured.architecture}, this model {info.architecture}")
    if measured.weights_fingerprint and info.weights_fingerprint:
        if measured.weights_fingerprint != info.weights_fingerprint:
            reasons.append(
                f"weights fingerprint {measured.weights_fingerprint[:19]}…, "
                f"this model's {info.weights_fingerprint[:19]}…"
            )
    elif measured.id != info.id:
        reasons.append(f"model {measured.id}, this model {info.id}, and no weights fingerprint to match them")
    return "; ".join(reasons) or None


def default_k(count: int) -> int:
    """How many blocks the top-k overlap compares: a quarter of them, at least one."""
    return max(1, count // 4)


def metric_agreement(
    adjacent: list[float],
    metric: MetricDrop,
    *,
    span: int = 1,
    k: int | None = None,
) -> dict[str, object]:
    """The agreement block of one metric (see the module docstring); blocks with a non-finite value are left out.

    Args:
        adjacent: d(x^l, x^(l+n)) for every start l (n = `span`; for n = 1 `summary.adjacent` of angular.json).
        metric: The metric's ΔP per removed block (or span).
        span: n, the blocks each variant removed: recorded as `span`, the distances as `span_distance`.
        k: Blocks compared by the top-k overlap (default: a quarter of the usable blocks).
    """
    pairs = [
        (layer, adjacent[layer], delta)
        for layer, delta in zip(metric.layers, metric.delta, strict=True)
        if 0 <= layer < len(adjacent) and math.isfinite(adjacent[layer]) and math.isfinite(delta)
    ]
    layers = [p[0] for p in pairs]
    distance, delta = [p[1] for p in pairs], [p[2] for p in pairs]
    rho, ci = spearman_interval(distance, delta)
    distinct = [distinct_values(distance), distinct_values(delta)]
    k = default_k(len(pairs)) if k is None else k
    loss = [-d if metric.higher_is_better else d for d in delta]  # > 0: the score got worse
    by_distance = [layers[i] for i in sorted(range(len(pairs)), key=lambda i: distance[i])]
    by_loss = [layers[i] for i in sorted(range(len(pairs)), key=lambda i: loss[i])]
    return {
        "layers": layers,
        "span": span,
        "span_distance": distance,  # d(x^l, x^(l+span)) for `layers`: the plot overlays it from here
        "spearman": rho,
        "spearman_ci95": None if ci is None else list(ci),
        "agree_when": "negative" if metric.higher_is_better else "positive",
        "interval": "fisher_z_bonett_wright",
        "distinct": distinct,  # distinct distances, distinct ΔP: below INFORMATIVE_DISTINCT ρ says little
        "informative": len(pairs) >= INFORMATIVE_DISTINCT and min(distinct) >= INFORMATIVE_DISTINCT,
        "top_k": min(k, len(pairs)),
        "top_k_overlap": top_k_overlap(by_distance, by_loss, min(k, len(pairs))) if pairs else None,
        "most_redundant_by_distance": by_distance[:k],
        "least_harmful_by_delta": by_loss[:k],
    }


def task_agreement(
    angular: AngularResult, metrics: dict[str, MetricDrop], source: str, span: int = 1
) -> dict[str, dict[str, object]]:
    """The agreement block of every metric of a task, each naming the angular file it used.

    With `span` n (prune-drop --span), variant l removed blocks [l, l+n): its distance is d(x^l, x^(l+n)).
    """
    adjacent = [angular.distance[l][l + span] for l in range(angular.num_layers - span + 1)]
    return {
        name: {"angular": source, **metric_agreement(adjacent, metric, span=span)} for name, metric in metrics.items()
    }
