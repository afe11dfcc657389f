"""The numbers a training run logs at each measurement, named as dashboards show them (`layerprobe/...`).

From an angular result: the lazy-block count with its 95 % range (blocks surely and possibly below the
threshold, as `track` computes them), the mean adjacent distance with its 95 % interval and each block's
adjacent distance; from a depth result the residual growth RMS(x^L)/RMS(x^0); and each block's gradient
norm, read from the gradients the training step's own backward left in `.grad` (`block_grad_norms`).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from layerprobe.core import Z95
from layerprobe.results import AngularResult, DepthResult, depth_summary
from layerprobe.review import track_angular

if TYPE_CHECKING:
    from layerprobe.model import LayerStack

PREFIX = "layerprobe/"


def scalars(angular: AngularResult, depth: DepthResult | None, grads: list[float] | None) -> dict[str, float]:
    """Every logged scalar of one measurement, by its dashboard name; unmeasured values are left out."""
    history = track_angular(angular, Z95, "measurement")
    out: dict[str, float | int | None] = {
        "lazy_blocks": history.lazy_count,
        "lazy_blocks_low": history.surely_below,
        "lazy_blocks_high": history.possibly_below,
        "mean_adjacent_d": history.mean_adjacent,
        "mean_adjacent_d_low": history.mean_adjacent_ci95[0] if history.mean_adjacent_ci95 else None,
        "mean_adjacent_d_high": history.mean_adjacent_ci95[1] if history.mean_adjacent_ci95 else None,
    }
    for block, d in enumerate(history.adjacent):
        out[f"adjacent_d/block_{block}"] = d
    if depth is not None:
        out["residual_growth"] = (depth.summary or depth_summary(depth))["rms_growth"]
    for block, norm in enumerate(grads or []):
        out[f"grad_norm/block_{block}"] = norm
    return {PREFIX + k: float(v) for k, v in out.items() if v is not None and math.isfinite(float(v))}


def block_grad_norms(stack: LayerStack) -> list[float] | None:
    """‖grad‖ of each block's parameters as `.grad` holds them now (None when a block has no gradient yet).

    Squares are summed in float64. Read between backward and the optimizer step, this is the gradient the
    optimizer applies: accumulated over micro-batches, averaged across DDP ranks, clipped by the Trainer.
    """
    norms = []
    for block in stack.blocks:
        grads = [p.grad for p in block.parameters() if p.grad is not None]
        if not grads:
            return None
        norms.append(math.sqrt(sum(float(g.detach().double().pow(2).sum()) for g in grads)))
    return norms
