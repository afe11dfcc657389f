"""Per-position statistics of the residual stream, accumulated over a corpus in float64, in constant memory.

For states x^0 … x^L (each (positions, hidden)):
- RMS of x^l: ‖x^l‖ / √d;
- variance of x^l across hidden units: mean_j (x^l_j − mean_k x^l_k)² (the Curse-of-Depth quantity);
- relative update of block l: ‖x^(l+1) − x^l‖ / ‖x^l‖;
- relative size of a sublayer's contribution: ‖f‖ / ‖r‖, r the residual f is added to.
Each is summarised over positions by mean, population standard deviation, min and max, merged batch by
batch with Chan's update so that the spread stays exact in float64 whatever the number of positions.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from typing import TYPE_CHECKING

from layerprobe.results import Spread

if TYPE_CHECKING:
    import torch


class SpreadAccumulator:
    """Running mean / std / min / max of one value per index (depth), over positions, in float64."""

    def __init__(self, size: int) -> None:
        """Nothing seen yet at any of `size` depths."""
        self.count = [0] * size
        self.mean = [0.0] * size
        self.m2 = [0.0] * size
        self.low = [math.inf] * size
        self.high = [-math.inf] * size
        self.nonfinite = [0] * size

    def update(self, index: int, values: torch.Tensor) -> None:
        """Add positions' values at one index.

        Args:
            index: which depth.
            values: (positions,) tensor; non-finite entries are counted and left out.
        """
        import torch

        values = values.detach().to(torch.float64).reshape(-1)
        finite = torch.isfinite(values)
        if not bool(finite.all()):
            self.nonfinite[index] += int((~finite).sum())
            values = values[finite]
        n = int(values.numel())
        if n == 0:
            return
        batch_mean = float(values.mean())
        batch_m2 = float((values - batch_mean).pow(2).sum())
        total = self.count[index] + n
        delta = batch_mean - self.mean[index]
        self.mean[index] += delta * n / total
        self.m2[index] += batch_m2 + delta * delta * self.count[index] * n / total
        self.count[index] = total
        self.low[index] = min(self.low[index], float(values.min()))
        self.high[index] = max(self.high[index], float(values.max()))

    def result(self) -> Spread:
        """Mean, population std, min and max per depth (NaN where nothing finite was seen), and the counts."""
        nan = math.nan
        return Spread(
            mean=[m if c else nan for m, c in zip(self.mean, self.count, strict=True)],
            std=[math.sqrt(m2 / c) if c else nan for m2, c in zip(self.m2, self.count, strict=True)],
            min=[v if c else nan for v, c in zip(self.low, self.count, strict=True)],
            max=[v if c else nan for v, c in zip(self.high, self.count, strict=True)],
            count=list(self.count),
        )


def rms(states: torch.Tensor) -> torch.Tensor:
    """‖x‖/√d per position. states: (positions, hidden) → (positions,) float64."""
    x = states.detach().double()
    return x.pow(2).mean(-1).sqrt()


def unit_variance(states: torch.Tensor) -> torch.Tensor:
    """Population variance across hidden units per position. states: (positions, hidden) → (positions,)."""
    return states.detach().double().var(-1, unbiased=False)


def relative_change(after: torch.Tensor, before: torch.Tensor) -> torch.Tensor:
    """‖after − before‖ / ‖before‖ per position. Both (positions, hidden) → (positions,) float64."""
    a, b = after.detach().double(), before.detach().double()
    return (a - b).norm(dim=-1) / b.norm(dim=-1)


def relative_size(contribution: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
    """‖f‖ / ‖r‖ per position. Both (..., hidden) → (...) float64."""
    return contribution.detach().double().norm(dim=-1) / residual.detach().double().norm(dim=-1)


class DepthAccumulator:
    """All depth statistics of one run: L+1 residual states, L blocks, L blocks × sublayers."""

    def __init__(self, num_layers: int, sublayer_kinds: tuple[str, ...] = (), absent: Collection[int] = ()) -> None:
        """Empty statistics for a stack of `num_layers` blocks (and these sublayer kinds of each).

        `absent` blocks are skipped by the pass (mllama's image-only blocks, text-only): their input and update
        are unmeasured (NaN, count 0); the update of the block before one is its update to x^(l+1), the state
        flowing past the skipped block.
        """
        self.num_layers = num_layers
        self.absent = frozenset(absent)
        self.rms = SpreadAccumulator(num_layers + 1)
        self.variance = SpreadAccumulator(num_layers + 1)
        self.update = SpreadAccumulator(num_layers)
        self.sublayers = {kind: SpreadAccumulator(num_layers) for kind in sublayer_kinds}
        self.nonfinite_tokens = 0

    def add_states(self, states: list[torch.Tensor]) -> None:
        """Add positions seen at every depth.

        Args:
            states: L+1 tensors, each (positions, hidden). Positions with a NaN/inf anywhere are left
                out of every residual statistic and counted in `nonfinite_tokens`.
        """
        import torch

        finite = torch.ones(states[0].shape[0], dtype=torch.bool, device=states[0].device)
        for s in states:
            finite &= torch.isfinite(s).all(-1).to(finite.device)
        if not bool(finite.all()):
            self.nonfinite_tokens += int((~finite).sum())
            states = [s[finite.to(s.device)] for s in states]
        for l, s in enumerate(states):
            if l in self.absent:
                continue
            self.rms.update(l, rms(s))
            self.variance.update(l, unit_variance(s))
            if l < self.num_layers:
                nxt = states[l + 1].to(s.device)
                self.update.update(l, relative_change(nxt, s))

    def add_sublayer(self, kind: str, layer: int, values: torch.Tensor) -> None:
        """Add ‖f‖/‖r‖ values (positions,) of one sublayer of one block."""
        self.sublayers[kind].update(layer, values)
