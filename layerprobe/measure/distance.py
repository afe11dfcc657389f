"""The angular distance between block inputs, accumulated over a corpus in constant memory.

d(x^i, x^j) = arccos(cos(x^i, x^j)) / π, averaged over measured positions (Gromov et al. 2024;
Mix-LN eq. 8). `AngularAccumulator` takes the states x^0 … x^L of a batch of positions and adds every
pair (i, j) at once, with the running sums its standard errors need (docs/methods.md); `angular.py`
feeds it the states of one pass over the corpus.

torch is imported where it is used: importing this room stays cheap for the command line.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from layerprobe.core import DEFAULT_CHUNK_BYTES

if TYPE_CHECKING:
    import torch


def angular_distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Angular distance in [0, 1] between vectors along the last axis.

    Args:
        a: (..., hidden) tensor, any float dtype.
        b: (..., hidden) tensor broadcastable to `a`.

    Returns:
        (...) float32 tensor: arccos(cos(a, b)) / π, computed in float32 after upcasting.
    """
    import torch
    import torch.nn.functional as F

    cos = (F.normalize(a.float(), dim=-1) * F.normalize(b.float(), dim=-1)).sum(-1)
    return torch.arccos(cos.clamp(-1.0, 1.0)) / math.pi


@dataclass(frozen=True)
class AccumulatorTotals:
    """An accumulator's running totals, on the CPU: what `AngularAccumulator.add` adds into another one."""

    sums: dict[str, torch.Tensor]  # the float64 running sums, by attribute name
    counts: dict[str, int]  # the position counts (`seen`, `count`, `nonfinite`)
    adjacent_windows: list[torch.Tensor] = field(default_factory=list)  # per-window rows, in window order
    window_positions: list[int] = field(default_factory=list)  # positions of each of those windows


class AngularAccumulator:
    """Running mean of d(x^i, x^j) over positions, and its standard error, for all pairs at once.

    Cosines are computed in float32 (after upcasting: bf16/fp16 states would overflow their squares),
    sums kept in float64. A state holding NaN or inf is left out of the pairs it belongs to, and only of
    those: pair (i, j) of a position is measured when x^i and x^j are both finite there, so one broken
    block leaves every other entry measured. Positions dropped from each pair are counted.

    The standard error comes from the spread between windows (a window is one sample of the corpus): for
    each pair the accumulator keeps, over windows w, the sums of S_w (the window's summed distance), n_w
    (its measured positions), S_w², S_w·n_w and n_w², which is constant memory however long the corpus.
    `stderr()` turns them into the ratio estimator's standard error (docs/methods.md).

    Within each span row n (the cells d(x^l, x^(l+n)) that compete for "most redundant"), it also keeps
    the cross moments between cells, so `row_difference_stderr()` can judge a cell against the row's
    minimum *paired* over the same windows: (L, L, L) float64 numbers, still independent of the corpus.

    Per window it keeps one row: the window's mean adjacent distance d(x^l, x^(l+1)) for every block l,
    and the window's positions (`adjacent_windows()`, `window_positions`), which `layerprobe stability`
    resamples: windows × L numbers, the only part that grows with the corpus.
    """

    def __init__(
        self,
        num_states: int,
        device: torch.device | str | None = "cpu",
        chunk_bytes: int = DEFAULT_CHUNK_BYTES,
        absent: Collection[int] = (),
    ) -> None:
        """An empty accumulator for `num_states` depths (L+1); `chunk_bytes` bounds the fp32 states upcast at once.

        `absent` depths are inputs of blocks the pass skips (mllama's image-only blocks, text-only): their state
        is the one flowing past the block (x^(l+1), `capture_block_states`), so a pair ending there is the
        distance across the blocks before it, while a pair starting there would only repeat the next start's
        with a span one too long: pairs (i, j), i < j, with i absent are unmeasured (NaN), and no position
        counts as non-finite for them.
        """
        import torch

        self.num_states = num_states
        index = torch.arange(num_states)
        skipped = torch.tensor([i in set(absent) for i in range(num_states)], dtype=torch.bool)
        self.pair_ok = (~skipped[torch.minimum(index[:, None], index[None, :])]).to(device)  # (L+1, L+1)
        self.device = device
        self.chunk_bytes = chunk_bytes  # fp32 states of all depths gathered onto `device` per step

        def zeros() -> torch.Tensor:
            return torch.zeros(num_states, num_states, dtype=torch.float64, device=device)

        self.sums, self.counts = zeros(), zeros()  # Σ_w S_w and Σ_w n_w per pair
        self.window_sq, self.window_cross, self.count_sq = zeros(), zeros(), zeros()  # Σ S_w², Σ S_w n_w, Σ n_w²
        self.windows = zeros()  # windows in which the pair has at least one measured position
        # Span rows: row n-1, column l is the cell (l, l+n); cells past the triangle point at (0, 0), masked.
        span = torch.arange(1, num_states, device=device)[:, None]
        start = torch.arange(num_states - 1, device=device)[None, :]
        inside = start + span <= num_states - 1
        self._row_i, self._row_j = torch.where(inside, start, 0), torch.where(inside, start + span, 0)
        self._row_inside = inside.double()
        cube = (num_states - 1,) * 3
        self.row_ss, self.row_sc, self.row_cc = (
            torch.zeros(cube, dtype=torch.float64, device=device) for _ in range(3)
        )  # per row: Σ_w S_a S_b, Σ_w S_a n_b, Σ_w n_a n_b over its cells a, b
        self.seen = 0  # positions given to update()
        self.count = 0  # positions whose every state is finite (measured in every pair)
        self.nonfinite = 0  # positions with a NaN/inf in at least one state
        self.window_rows: list[torch.Tensor] = []  # per update: (windows, L) mean adjacent distances, float64
        self.window_positions: list[int] = []  # per window (in order): its positions, the rows' weights

    def update(self, states: list[torch.Tensor], window_sizes: list[int] | None = None) -> None:
        """Add positions to the mean.

        Args:
            states: L+1 tensors, each (positions, hidden): the same positions seen at every depth.
            window_sizes: how the positions split into windows (consecutive runs, summing to positions);
                each window is one sample for the standard error. None: all positions form one window.
        """
        import torch
        import torch.nn.functional as F

        if len(states) != self.num_states:
            raise ValueError(f"expected {self.num_states} states, got {len(states)}")
        total, hidden = states[0].shape
        sizes = [total] if window_sizes is None else list(window_sizes)
        if sum(sizes) != total or any(size < 0 for size in sizes):
            raise ValueError(f"window sizes {sizes} do not split {total} positions")
        window_of = torch.repeat_interleave(
            torch.arange(len(sizes), device=self.device), torch.tensor(sizes, device=self.device)
        )
        shape = (len(sizes), self.num_states, self.num_states)
        window_sums = torch.zeros(shape, dtype=torch.float64, device=self.device)
        window_counts = torch.zeros(shape, dtype=torch.float64, device=self.device)
        step = max(1, self.chunk_bytes // (self.num_states * hidden * 4))
        with full_fp32_matmul():
            for start in range(0, total, step):
                chunk = torch.stack(
                    [s[start : start + step].to(self.device, torch.float32) for s in states], dim=1
                )  # (positions, L+1, hidden)
                ids = window_of[start : start + step]
                finite = torch.isfinite(chunk).all(dim=2)  # (positions, L+1)
                unit = F.normalize(chunk, dim=-1)
                if bool(finite.all()) and bool(self.pair_ok.all()):
                    dist = _distances(unit)
                    window_counts += torch.bincount(ids, minlength=len(sizes)).double()[:, None, None]
                    self.count += chunk.shape[0]
                else:
                    self.nonfinite += int((~finite.all(dim=1)).sum())
                    unit = unit.masked_fill(~finite[..., None], 0.0)
                    valid = finite[:, :, None] & finite[:, None, :] & self.pair_ok  # (positions, L+1, L+1)
                    dist = _distances(unit).masked_fill_(~valid, 0.0)
                    window_counts.index_add_(0, ids, valid.double())
                    self.count += int(finite.all(dim=1).sum())
                window_sums.index_add_(0, ids, dist.double())
        self.seen += total
        self.sums += window_sums.sum(dim=0)
        self.counts += window_counts.sum(dim=0)
        self.window_sq += (window_sums * window_sums).sum(dim=0)
        self.window_cross += (window_sums * window_counts).sum(dim=0)
        self.count_sq += (window_counts * window_counts).sum(dim=0)
        self.windows += (window_counts > 0).sum(dim=0)
        rows_s = window_sums[:, self._row_i, self._row_j] * self._row_inside  # (windows, L, L)
        rows_n = window_counts[:, self._row_i, self._row_j] * self._row_inside
        self.row_ss += torch.einsum("wra,wrb->rab", rows_s, rows_s)
        self.row_sc += torch.einsum("wra,wrb->rab", rows_s, rows_n)
        self.row_cc += torch.einsum("wra,wrb->rab", rows_n, rows_n)
        self.window_rows.append(_adjacent_means(window_sums, window_counts).cpu())
        self.window_positions.extend(sizes)

    _TOTALS = ("sums", "counts", "window_sq", "window_cross", "count_sq", "windows", "row_ss", "row_sc", "row_cc")
    _COUNTS = ("seen", "count", "nonfinite")

    def totals(self) -> AccumulatorTotals:
        """The running totals (on the CPU), which `add` adds into another accumulator of the same size.

        An `update` adds each total exactly once, so a fresh accumulator's totals after one `update` are that
        batch's increments bit for bit; `add`-ing them in batch order reproduces one accumulator's sums
        exactly. That is how several processes' batches make the matrix one process would measure.
        """
        return AccumulatorTotals(
            {name: getattr(self, name).cpu() for name in self._TOTALS},
            {n: getattr(self, n) for n in self._COUNTS},
            list(self.window_rows),
            list(self.window_positions),
        )

    def add(self, totals: AccumulatorTotals) -> None:
        """Add another accumulator's `totals` (of the same number of states) into this one.

        Its per-window rows are appended after this one's: adding batches in order keeps the windows in order.
        """
        for name in self._TOTALS:
            getattr(self, name).add_(totals.sums[name].to(self.device))
        for name in self._COUNTS:
            setattr(self, name, getattr(self, name) + totals.counts[name])
        self.window_rows.extend(totals.adjacent_windows)
        self.window_positions.extend(totals.window_positions)

    def adjacent_windows(self) -> list[list[float]]:
        """Per window (rows, in order), per block l (columns): the window's mean d(x^l, x^(l+1)).

        The mean is over the window's measured positions of the symmetrised entry, as `result()` is, so the
        positions-weighted mean of a column over windows is `result()[l][l+1]` up to float rounding (exactly
        so when every state is finite; a window that never measured a pair has NaN there).
        """
        import torch

        if not self.window_rows:
            return []
        return torch.cat(self.window_rows).tolist()

    def result(self) -> list[list[float]]:
        """The mean distance matrix: symmetric, 0 on the diagonal; NaN where a pair was never measured."""
        return _symmetric(self._mean()).tolist()

    def stderr(self) -> list[list[float]]:
        """Standard error of each entry of `result()`, from the spread between windows.

        SE² = K/(K−1) · Σ_w (S_w − d̄·n_w)² / N², with K the windows that measured the pair, N = Σ_w n_w and
        d̄ = Σ_w S_w / N: the ratio (cluster) estimator, which weights each window's mean by its positions.
        NaN where fewer than 2 windows measured the pair; 0 on the diagonal.
        """
        import torch

        mean = self._mean()
        residual = self.window_sq - 2 * mean * self.window_cross + mean * mean * self.count_sq
        k = self.windows
        variance = residual.clamp(min=0.0) * k / (k - 1).clamp(min=1.0) / (self.counts * self.counts)
        variance = torch.where(k >= 2, variance, torch.full_like(variance, math.nan))
        return _symmetric(variance.sqrt()).tolist()

    def row_difference_stderr(self) -> list[list[float]]:
        """Per cell (l, l+n): the stderr of d(x^l, x^(l+n)) − the minimum of its span row, paired over windows.

        Both cells are measured on the same windows, so the difference is taken window by window:
        SE² = Var_a + Var_b − 2·Cov_ab, with Cov_ab = K/(K−1) · Σ_w (S_a − d̄_a n_a)(S_b − d̄_b n_b) / (N_a N_b)
        (K: the fewer windows of the two). The minimum l* is chosen as `results.angular_summary` chooses
        it (smallest finite mean, ties to the lowest l); its own cell is 0. Symmetric; NaN where a cell or
        its row's minimum is unmeasured or fewer than 2 windows measured both; 0 on the diagonal.
        """
        import torch

        size = self.num_states
        mean, raw = _symmetric(self._mean()), self._mean()
        out = torch.full((size, size), math.nan, dtype=torch.float64)
        out.fill_diagonal_(0.0)
        for row in range(size - 1):
            span = row + 1
            starts = [l for l in range(size - span) if math.isfinite(mean[l, l + span])]
            if not starts:
                continue
            best = min(starts, key=lambda l: (float(mean[l, l + span]), l))
            cells = torch.arange(size - span, device=self.device)
            d, n = raw[cells, cells + span], self.counts[cells, cells + span]
            k = self.windows[cells, cells + span]
            ss, sc, cc = self.row_ss[row][: len(cells), : len(cells)], self.row_sc[row], self.row_cc[row]
            sc, cc = sc[: len(cells), : len(cells)], cc[: len(cells), : len(cells)]
            d0 = torch.nan_to_num(d)  # unmeasured cells are masked below; keep their NaN out of the products
            residual = ss - d0[None, :] * sc - d0[:, None] * sc.T + d0[:, None] * d0[None, :] * cc
            pair_k = torch.minimum(k[:, None], k[None, :])
            cov = residual * pair_k / (pair_k - 1).clamp(min=1.0) / (n[:, None] * n[None, :]).clamp(min=1.0)
            variance = cov.diagonal() + cov[best, best] - 2 * cov[:, best]
            se = variance.clamp(min=0.0).sqrt().cpu()
            for l in starts:
                enough = bool(pair_k[l, best] >= 2)
                value = 0.0 if l == best else float(se[l]) if enough else math.nan
                out[l, l + span] = out[l + span, l] = value
        return out.tolist()

    def nonfinite_positions(self) -> list[list[int]]:
        """Per pair (i, j): positions left out because x^i or x^j held NaN/inf there (0 where a pair starts absent)."""
        left_out = (self.seen - self.counts).round().long()
        return left_out.masked_fill(~self.pair_ok.to(left_out.device), 0).tolist()

    def _mean(self) -> torch.Tensor:
        """The mean distance of every pair (NaN where never measured), not yet symmetrised."""
        import torch

        return torch.where(self.counts > 0, self.sums / self.counts.clamp(min=1.0), math.nan)


def _adjacent_means(window_sums: torch.Tensor, window_counts: torch.Tensor) -> torch.Tensor:
    """Each window's mean d(x^l, x^(l+1)), (windows, L+1, L+1) sums and counts → (windows, L); NaN where unmeasured.

    The two triangles' sums are averaged, as `_symmetric` averages the means (the Gram matrix's rounding).
    """
    import torch

    size = window_sums.shape[1]
    low = torch.arange(size - 1, device=window_sums.device)
    high = low + 1
    sums = (window_sums[:, low, high] + window_sums[:, high, low]) / 2
    counts = window_counts[:, low, high]
    return torch.where(counts > 0, sums / counts.clamp(min=1.0), math.nan)


def _distances(unit: torch.Tensor) -> torch.Tensor:
    """All pairwise angular distances of each position's states: (positions, L+1, hidden) → (positions, L+1, L+1)."""
    import torch

    cos = torch.bmm(unit, unit.transpose(1, 2)).clamp_(-1.0, 1.0)
    return torch.arccos_(cos).div_(math.pi)


def _symmetric(matrix: torch.Tensor) -> torch.Tensor:
    """(M + Mᵀ)/2, which only removes float rounding of the Gram matrix, with the measured diagonal set to 0."""
    import torch

    matrix = (matrix + matrix.T) / 2
    diagonal = matrix.diagonal()
    matrix.diagonal().copy_(torch.where(diagonal.isnan(), diagonal, torch.zeros_like(diagonal)))
    return matrix


@contextlib.contextmanager
def full_fp32_matmul() -> Iterator[None]:
    """Keep cosines in true fp32 even where a user enabled TF32 (10-bit mantissa) for matmuls.

    Adjacent blocks of deep LLMs are often within d ≈ 0.01 of each other; TF32 rounding of the Gram
    matrix would be a visible part of that.
    """
    import torch

    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(before)
