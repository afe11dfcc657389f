"""One run's angular numbers for the history: lazy blocks as a 95 % range, the mean adjacent distance ± SE.

Lazy blocks (d(x^l, x^(l+1)) below the summary's threshold) are counted three ways: the point count, the
blocks *surely* below (95 % upper bound d + 1.96·SE below the threshold) and those *possibly* below (lower
bound d − 1.96·SE below it). The mean adjacent distance's standard error is computed from per-window
values when the result has them: the blocks are measured on the same windows, so their errors are
correlated and only the spread of each window's mean over blocks says how much the mean moves. Without
them it falls back to sqrt(Σ SE_l²) / L, which assumes the blocks independent and says so.
See docs/methods.md, "The history of several runs".
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from layerprobe.core import ResultError
from layerprobe.results import INDEPENDENT_BLOCKS, WINDOWS, AngularResult, TrackAngular


def lazy_range(
    adjacent: Sequence[float], stderr: Sequence[float] | None, threshold: float, z: float
) -> tuple[int | None, int | None]:
    """(surely below, possibly below) the threshold at the interval d ± z·SE; (None, None) without stderrs.

    Unmeasured blocks (non-finite d) count in neither. A block with an unknown (NaN) SE cannot be sure,
    but may be below: it counts as possibly below only.
    """
    if stderr is None:
        return None, None
    surely = possibly = 0
    for d, se in zip(adjacent, stderr, strict=True):
        if not math.isfinite(d):
            continue
        if not math.isfinite(se):
            possibly += 1
            continue
        surely += d + z * se < threshold
        possibly += d - z * se < threshold
    return surely, possibly


def windowed_mean_stderr(
    windows: Sequence[Sequence[float]], positions: Sequence[int], blocks: Sequence[int]
) -> tuple[float, float]:
    """The mean over `blocks` of the adjacent distance, and its stderr, from per-window values.

    Window w contributes a_w, its mean over the blocks of its mean distance, weighted by its n_w positions:
    ā = Σ_w n_w a_w / N and SE² = K/(K−1) · Σ_w n_w² (a_w − ā)² / N² (the ratio estimator of angular's own
    stderrs, docs/methods.md). Windows with a non-finite value in one of the blocks, or no position, are
    left out. NaN when fewer than 2 windows remain.
    """
    values = []
    for row, count in zip(windows, positions, strict=True):
        picked = [row[l] for l in blocks]
        if count > 0 and blocks and all(math.isfinite(x) for x in picked):
            values.append((sum(picked) / len(picked), count))
    total = sum(count for _, count in values)
    if not total:
        return math.nan, math.nan
    mean = sum(a * count for a, count in values) / total
    if len(values) < 2:
        return mean, math.nan
    k = len(values)
    spread = sum(count * count * (a - mean) ** 2 for a, count in values)
    return mean, math.sqrt(k / (k - 1) * spread) / total


def independent_mean_stderr(stderr: Sequence[float], blocks: Sequence[int]) -> float:
    """sqrt(Σ SE_l²) / L over `blocks`: the stderr of the mean if the blocks' errors were independent."""
    if not blocks:
        return math.nan
    return math.sqrt(sum(stderr[l] ** 2 for l in blocks)) / len(blocks)


def track_angular(result: AngularResult, z: float, source: str) -> TrackAngular:
    """The history numbers of one angular result (`source`: its file, for messages)."""
    summary = result.summary or result.summarize()
    adjacent, stderr = summary["adjacent"], summary["adjacent_stderr"]
    threshold = summary["lazy_threshold"]
    surely, possibly = lazy_range(adjacent, stderr, threshold, z)
    blocks = [l for l, d in enumerate(adjacent) if math.isfinite(d)]
    windows = result.adjacent_windows
    positions = result.window_positions
    method: str | None
    if windows is not None and positions is not None:
        check_windows(windows, positions, result.num_layers, source)
        _, se = windowed_mean_stderr(windows, positions, blocks)
        method = WINDOWS
    elif stderr is not None:
        se, method = independent_mean_stderr(stderr, blocks), INDEPENDENT_BLOCKS
    else:
        se, method = None, None
    mean = summary["mean_adjacent"]
    ci = None
    if mean is not None and se is not None and math.isfinite(se):
        ci = [mean - z * se, mean + z * se]
    return TrackAngular(
        lazy_threshold=threshold,
        lazy_count=summary["lazy_count"],
        surely_below=surely,
        possibly_below=possibly,
        mean_adjacent=mean,
        mean_adjacent_stderr=se,
        mean_adjacent_ci95=ci,
        stderr_method=method,
        adjacent=list(adjacent),
        adjacent_stderr=None if stderr is None else list(stderr),
    )


def check_windows(windows: Sequence[Sequence[float]], positions: Sequence[int], num_layers: int, source: str) -> None:
    """Refuse per-window values whose shape does not fit the result (one row per window, one column per block)."""
    if len(windows) != len(positions) or any(len(row) != num_layers for row in windows):
        raise ResultError(
            f"{source}: adjacent_windows must hold one row of L = {num_layers} values per entry of window_positions."
        )
