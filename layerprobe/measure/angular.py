"""The angular-distance matrix between the inputs of every pair of blocks, in one forward pass.

d(x^i, x^j) = arccos(cos(x^i, x^j)) / π, averaged over measured positions (Gromov et al. 2024;
Mix-LN eq. 8). Every pair (i, j) comes from the same captured states, so one pass over the corpus
gives the whole (L+1)×(L+1) matrix instead of one pass per span.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator
from typing import Any

from layerprobe.core import DEFAULT_CHUNK_BYTES, AngularSpec, UnsupportedModel
from layerprobe.data import Window, batches, build_windows, iter_documents, windows_before_loading
from layerprobe.model import (
    LayerStack,
    LoadedModel,
    Progress,
    World,
    capture_block_states,
    check_loadable,
    find_layers,
    load_model,
    model_info,
    skeleton_stack,
    takes_argument,
)
from layerprobe.model import world as distributed_world
from layerprobe.results import AngularResult, RunTimer

_CHUNK_BYTES = DEFAULT_CHUNK_BYTES  # fp32 states upcast at once: (positions × (L+1) × hidden × 4) bytes, ~256 MiB


def angular_distance(a, b):
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
    """

    def __init__(self, num_states: int, device: Any = "cpu", chunk_bytes: int = _CHUNK_BYTES) -> None:
        import torch

        self.num_states = num_states
        self.device = device
        self.chunk_bytes = chunk_bytes  # fp32 states of all depths gathered onto `device` per step

        def zeros():
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

    def update(self, states: list, window_sizes: list[int] | None = None) -> None:
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
                if bool(finite.all()):
                    dist = _distances(unit)
                    window_counts += torch.bincount(ids, minlength=len(sizes)).double()[:, None, None]
                    self.count += chunk.shape[0]
                else:
                    self.nonfinite += int((~finite.all(dim=1)).sum())
                    unit = unit.masked_fill(~finite[..., None], 0.0)
                    valid = finite[:, :, None] & finite[:, None, :]  # (positions, L+1, L+1)
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

    _TOTALS = ("sums", "counts", "window_sq", "window_cross", "count_sq", "windows", "row_ss", "row_sc", "row_cc")
    _COUNTS = ("seen", "count", "nonfinite")

    def totals(self) -> dict[str, Any]:
        """The running totals (on the CPU), which `add` adds into another accumulator of the same size.

        An `update` adds each total exactly once, so a fresh accumulator's totals after one `update` are that
        batch's increments bit for bit; `add`-ing them in batch order reproduces one accumulator's sums
        exactly. That is how several processes' batches make the matrix one process would measure.
        """
        return {name: getattr(self, name).cpu() for name in self._TOTALS} | {n: getattr(self, n) for n in self._COUNTS}

    def add(self, totals: dict[str, Any]) -> None:
        for name in self._TOTALS:
            getattr(self, name).add_(totals[name].to(self.device))
        for name in self._COUNTS:
            setattr(self, name, getattr(self, name) + totals[name])

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
        """Per pair (i, j): positions left out because x^i or x^j held NaN/inf there."""
        return (self.seen - self.counts).round().long().tolist()

    def _mean(self):
        import torch

        return torch.where(self.counts > 0, self.sums / self.counts.clamp(min=1.0), math.nan)


def _distances(unit):
    """All pairwise angular distances of each position's states: (positions, L+1, hidden) → (positions, L+1, L+1)."""
    import torch

    cos = torch.bmm(unit, unit.transpose(1, 2)).clamp_(-1.0, 1.0)
    return torch.arccos_(cos).div_(math.pi)


def _symmetric(matrix):
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


def measure(
    loaded: LoadedModel,
    stack: LayerStack,
    windows: list[Window],
    positions: str,
    batch_size: int,
    on_batch: Callable[[int], None] | None = None,
    max_state_bytes: int = DEFAULT_CHUNK_BYTES,
    world: World | None = None,
) -> AngularAccumulator:
    """Run the windows through the model once, accumulating distances at the chosen positions.

    `positions="all"` measures every position; `"last"` the last text token of each window. The states
    of one batch stay on the devices that computed them (several GPUs under --device-map); the
    accumulator gathers at most `max_state_bytes` of them (fp32, all depths) onto its device at a time.
    Launched on several processes (`world`), each runs every world.size-th batch into a fresh accumulator,
    and the batches' totals are added in one-process order on every rank: the result is identical to one
    process's.
    """
    import torch

    world = world or World()
    accumulator = AngularAccumulator(stack.num_layers + 1, device=loaded.input_device, chunk_bytes=max_state_bytes)
    totals_by_batch: dict[int, dict[str, Any]] = {}
    extra = {"use_cache": False} if takes_argument(loaded.model, "use_cache") else {}
    with torch.inference_mode(), capture_block_states(stack) as states:
        for index, group in enumerate(batches(windows, batch_size)):
            if index % world.size != world.rank:
                continue
            ids = torch.tensor([w.input_ids for w in group], device=loaded.input_device)
            states.clear()
            loaded.model(input_ids=ids, **extra)
            if len(states) != stack.num_layers + 1:
                raise RuntimeError(
                    f"captured {len(states)} states for {stack.num_layers} blocks; "
                    "a block was called more or less than once per forward pass"
                )
            if any(tuple(s.shape[:2]) != tuple(ids.shape) for s in states):
                raise UnsupportedModel(
                    f"The blocks of {loaded.architecture} pass hidden states shaped "
                    f"{tuple(states[0].shape)} for input {tuple(ids.shape)}; layerprobe "
                    "expects (batch, sequence, hidden).",
                    hint="Sequence-first (remote-code) models are not supported.",
                )
            if positions == "all":
                flat = [s.reshape(-1, s.shape[-1]) for s in states]
                sizes = [len(w.input_ids) for w in group]
            else:
                rows = torch.arange(len(group))
                last = torch.tensor([w.last_text_position for w in group])
                flat = [s[rows.to(s.device), last.to(s.device)] for s in states]  # states may span GPUs
                sizes = [1] * len(group)
            if world.size == 1:
                accumulator.update(flat, sizes)  # each window is one sample for the standard error
            else:
                piece = AngularAccumulator(
                    stack.num_layers + 1, device=loaded.input_device, chunk_bytes=max_state_bytes
                )
                piece.update(flat, sizes)
                totals_by_batch[index] = piece.totals()
            states.clear()
            if on_batch:
                on_batch(sum(len(w.input_ids) for w in group))
    if world.size > 1:  # (L+1)² and L³ fp64 totals per batch: small next to the model every rank holds
        gathered = {i: t for piece in world.gather(totals_by_batch) for i, t in piece.items()}
        for index in sorted(gathered):
            accumulator.add(gathered[index])
    return accumulator


def run_angular(
    spec: AngularSpec, progress: Progress | None = None, loaded: LoadedModel | None = None, world: World | None = None
) -> AngularResult:
    """Load the model (unless given), build the windows, measure, and return the result.

    Under `accelerate launch`/`torchrun` (see layerprobe.model.ranks) every rank measures a share of the
    batches and every rank returns the same, whole result; the caller writes it on rank 0 only.
    """
    progress = progress or Progress()
    world = world or distributed_world()
    timer = RunTimer()
    progress.stage("Reading corpus", spec.corpus.tokens, "tok")
    if loaded is None:  # everything cheap (config, tokenizer, the whole corpus) before any weight is read
        check_loadable(spec.model)  # e.g. bitsandbytes missing for --load-in-4bit: before streaming a corpus
        skeleton_stack(spec.model)
        tokenizer, windows, seq_len = windows_before_loading(spec.model, spec.corpus, progress.on_advance)
        progress.stage("Loading model")
        loaded = load_model(spec.model, purpose="base", tokenizer=tokenizer)
    else:
        seq_len = min(spec.corpus.seq_len, loaded.context_length or spec.corpus.seq_len)
        windows = build_windows(
            loaded.tokenizer, iter_documents(spec.corpus), spec.corpus.tokens, seq_len, on_tokens=progress.on_advance
        )
    stack = find_layers(loaded.model, spec.model.layers_path)
    progress.stage("Measuring", spec.corpus.tokens, "tok")
    measure_clock = time.perf_counter()
    accumulator = measure(
        loaded, stack, windows, spec.positions, spec.batch_size, progress.on_advance, spec.max_state_bytes, world
    )
    measure_seconds = time.perf_counter() - measure_clock
    corpus = spec.corpus
    data = {
        "dataset": corpus.dataset,
        "config": corpus.dataset_config if corpus.is_hub else None,
        "split": corpus.split if corpus.is_hub else None,
        "text_field": corpus.text_field,
        "tokens": sum(len(w.input_ids) for w in windows),
        "seq_len": seq_len,
        "windows": len(windows),
        "positions": spec.positions,
        "positions_averaged": accumulator.count,
    }
    return AngularResult(
        model=model_info(loaded, stack),
        data=data,
        distance=accumulator.result(),
        distance_stderr=accumulator.stderr(),
        row_difference_stderr=accumulator.row_difference_stderr(),
        nonfinite_tokens=accumulator.nonfinite,
        nonfinite_positions=accumulator.nonfinite_positions(),
        run=timer.finish(loaded.device_label),
        tokens_per_second=data["tokens"] / measure_seconds if measure_seconds > 0 else 0.0,
    )
