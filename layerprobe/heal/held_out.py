"""The held-out comparison of the original, the pruned and the healed model, window by window.

Scored by the corpus metric (`evaluate.CorpusScorer`, the same NLL, KL(original ‖ model) and top-1
agreement as `--task corpus`) on windows the fit never saw. Each model's mean gets a normal interval
from the per-window stderr; each difference to the original a paired one (`stats.paired_mean_stats`),
and the healed model's recovery a paired bootstrap (recovery.py).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Hashable, Iterator, Sequence
from typing import TYPE_CHECKING, cast

from layerprobe.core import CORPUS_TASK, DEFAULT_DRAWS, DEFAULT_SEED, Z95, CorpusSpec
from layerprobe.evaluate import CorpusScorer, within_range
from layerprobe.heal.recovery import recovery
from layerprobe.model import LayerStack, removed_blocks
from layerprobe.stats import PairedDelta, paired_mean_stats

if TYPE_CHECKING:
    from layerprobe.data import Window
    from layerprobe.model import LoadedModel

MODELS = ("original", "pruned", "healed")
METRICS = ("nll", "kl", "top1_agreement")
HIGHER_IS_BETTER = {"nll": False, "kl": False, "top1_agreement": True}
# What a window's value (so any mean of them) can be: a normal interval near a bound is cut to it.
VALUE_RANGES = {"nll": (0.0, math.inf), "kl": (0.0, math.inf), "top1_agreement": (0.0, 1.0)}
# The two variants' keys: the scorer calls `ablate` with them (its span checks are skipped with `ablate`).
_PRUNED, _HEALED = cast("tuple[int, ...]", ("pruned",)), cast("tuple[int, ...]", ("healed",))
Heal = Callable[[], contextlib.AbstractContextManager[object]]


def per_window(
    loaded: LoadedModel,
    stack: LayerStack,
    removed: Sequence[int],
    heal: Heal,
    windows: list[Window],
    corpus: CorpusSpec,
    batch_size: int,
) -> dict[str, dict[str, list[float]]]:
    """Model → metric → its per-window values on `windows`; `heal()` turns the pruned model into the healed one."""

    @contextlib.contextmanager
    def variant(key: Hashable) -> Iterator[None]:
        with contextlib.ExitStack() as stacked:
            if key == _HEALED:
                stacked.enter_context(heal())
            stacked.enter_context(removed_blocks(stack, list(removed)))
            yield

    scorer = CorpusScorer(loaded, stack, corpus, [_PRUNED, _HEALED], batch_size, windows=windows, ablate=variant)
    found: dict[str, dict[str, list[float]]] = {}
    for name, key in zip(MODELS, (None, _PRUNED, _HEALED), strict=True):
        with scorer.variant(key):
            evaluation = scorer.score()
        assert evaluation.per_sample is not None
        found[name] = {}
        for metric in METRICS:
            values = evaluation.per_sample[metric].values[CORPUS_TASK]
            found[name][metric] = [float(values[i]) for i in sorted(values)]
    return found


def _mean(values: Sequence[float], metric: str) -> dict[str, object]:
    """A model's mean with its normal interval, cut to what the metric can be.

    A top-1 agreement of 0.26 on two windows is not [-0.03, 0.56]; the mean lies in the range, so the cut
    interval still holds it.
    """
    n = len(values)
    mean = math.fsum(values) / n
    stderr = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1) / n) if n > 1 else None
    low, high = VALUE_RANGES[metric]
    ci = [max(mean - Z95 * stderr, low), min(mean + Z95 * stderr, high)] if stderr is not None else None
    return {"value": mean, "stderr": stderr, "ci95": ci}


def _delta(delta: PairedDelta, metric: str, base: Sequence[float] | None = None) -> dict[str, object]:
    """A paired difference to `base`'s values, its interval cut to what the difference can reach.

    Any difference of two means in [low, high] lies in [low − high, high − low]; against the original,
    whose KL is 0 and top-1 agreement 1 on every window, `evaluate.within_range` cuts it further, as in
    prune-drop. The difference lies in both ranges, so the cut interval still holds it.
    """
    low, high = VALUE_RANGES[metric]
    ci = None if delta.ci95 is None else [max(delta.ci95[0], low - high), min(delta.ci95[1], high - low)]
    if ci is not None and base is not None and len(set(base)) == 1:  # a constant: the original against itself
        ci = within_range(metric, base[0], [ci])[0]
    return {"value": delta.delta, "stderr": delta.stderr, "ci95": ci, "method": delta.method}


def summarise(
    values: dict[str, dict[str, list[float]]], draws: int = DEFAULT_DRAWS, seed: int = DEFAULT_SEED
) -> dict[str, dict[str, object]]:
    """heal.json's `held_out.metrics`: each model's mean, the paired differences, and the recovery."""
    summary: dict[str, dict[str, object]] = {}
    for metric in METRICS:
        o, p, h = (values[m][metric] for m in MODELS)
        found = recovery(o, p, h, draws, seed)
        summary[metric] = {
            "higher_is_better": HIGHER_IS_BETTER[metric],
            **{m: _mean(values[m][metric], metric) for m in MODELS},
            "pruned_delta": _delta(paired_mean_stats(o, p), metric, o),
            "healed_delta": _delta(paired_mean_stats(o, h), metric, o),
            "healed_vs_pruned": _delta(paired_mean_stats(p, h), metric),
            "recovery": {
                "value": found.value,
                "ci95": list(found.ci95) if found.ci95 is not None else None,
                "defined": found.defined,
                "reason": found.reason,
            },
        }
    return summary
