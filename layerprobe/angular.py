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

from layerprobe.corpus import Window, batches, build_windows, iter_documents
from layerprobe.distributed import World
from layerprobe.distributed import world as distributed_world
from layerprobe.errors import UnsupportedModel
from layerprobe.layers import LayerStack, capture_block_states, find_layers
from layerprobe.models import LoadedModel, load_model, takes_argument
from layerprobe.progress import Progress
from layerprobe.provenance import RunTimer, model_info
from layerprobe.results import AngularResult
from layerprobe.specs import AngularSpec

_CHUNK_BYTES = 256 * 1024**2  # fp32 states upcast at once: (positions × (L+1) × hidden × 4) bytes, ~256 MiB


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
    """Running mean of d(x^i, x^j) over positions, for all pairs at once, in constant memory.

    Cosines are computed in float32 (after upcasting: bf16/fp16 states would overflow their squares),
    sums kept in float64. Positions whose states hold NaN or inf anywhere are left out and counted.
    """

    def __init__(self, num_states: int, device: Any = "cpu") -> None:
        import torch

        self.num_states = num_states
        self.sums = torch.zeros(num_states, num_states, dtype=torch.float64, device=device)
        self.count = 0
        self.nonfinite = 0
        self.parts: list | None = None  # with keep_parts(): every chunk's fp64 sum, in order, instead of adding

    def keep_parts(self) -> AngularAccumulator:
        """Record each chunk's sum rather than adding it, so another process can add them in global order.

        fp64 addition is not associative: summing the pieces of several ranks in the one-process order is
        what makes a multi-process matrix bit-identical to a one-process one.
        """
        self.parts = []
        return self

    def add_parts(self, parts: list) -> None:
        for part in parts:
            self.sums += part.to(self.sums.device)

    def update(self, states: list) -> None:
        """Add positions to the mean.

        Args:
            states: L+1 tensors, each (positions, hidden): the same positions seen at every depth.
        """
        import torch
        import torch.nn.functional as F

        if len(states) != self.num_states:
            raise ValueError(f"expected {self.num_states} states, got {len(states)}")
        total, hidden = states[0].shape
        step = max(1, _CHUNK_BYTES // (self.num_states * hidden * 4))
        with full_fp32_matmul():
            for start in range(0, total, step):
                chunk = torch.stack(
                    [s[start : start + step].to(self.sums.device, torch.float32) for s in states], dim=1
                )  # (positions, L+1, hidden)
                finite = torch.isfinite(chunk).all(dim=2).all(dim=1)
                if not bool(finite.all()):
                    self.nonfinite += int((~finite).sum())
                    chunk = chunk[finite]
                unit = F.normalize(chunk, dim=-1)
                cos = torch.bmm(unit, unit.transpose(1, 2)).clamp_(-1.0, 1.0)  # (positions, L+1, L+1)
                part = (torch.arccos(cos) / math.pi).sum(dim=0, dtype=torch.float64)
                if self.parts is None:
                    self.sums += part
                else:
                    self.parts.append(part.cpu())
                self.count += unit.shape[0]

    def result(self) -> list[list[float]]:
        """The mean distance matrix: symmetric, exactly zero on the diagonal; NaN if nothing was measured."""
        if self.count == 0:
            return [[math.nan] * self.num_states for _ in range(self.num_states)]
        mean = self.sums / self.count
        mean = (mean + mean.T) / 2
        mean.fill_diagonal_(0.0)
        return mean.tolist()


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
    world: World | None = None,
) -> AngularAccumulator:
    """Run the windows through the model once, accumulating distances at the chosen positions.

    `positions="all"` measures every position; `"last"` the last text token of each window. Launched on
    several processes (`world`), each runs every world.size-th batch and rank 0 adds all chunk sums in
    the order one process would have: the matrix is identical to a one-process run's.
    """
    import torch

    world = world or World()
    accumulator = AngularAccumulator(stack.num_layers + 1, device=loaded.input_device)
    if world.size > 1:
        accumulator.keep_parts()
    parts_by_batch: dict[int, list] = {}
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
            else:
                rows = torch.arange(len(group))
                last = torch.tensor([w.last_text_position for w in group])
                flat = [s[rows.to(s.device), last.to(s.device)] for s in states]  # states may span GPUs
            accumulator.update(flat)
            if accumulator.parts is not None:
                parts_by_batch[index], accumulator.parts = accumulator.parts, []
            states.clear()
            if on_batch:
                on_batch(sum(len(w.input_ids) for w in group))
    if world.size == 1:
        return accumulator
    return _combine(accumulator, world.gather((parts_by_batch, accumulator.count, accumulator.nonfinite)))


def _combine(accumulator: AngularAccumulator, pieces: list) -> AngularAccumulator:
    """One accumulator from every rank's chunk sums and counts, added in one-process batch order."""
    whole = AngularAccumulator(accumulator.num_states, device=accumulator.sums.device)
    by_batch = {index: parts for rank_parts, _, _ in pieces for index, parts in rank_parts.items()}
    for index in sorted(by_batch):
        whole.add_parts(by_batch[index])
    whole.count = sum(count for _, count, _ in pieces)
    whole.nonfinite = sum(nonfinite for _, _, nonfinite in pieces)
    return whole


def run_angular(
    spec: AngularSpec, progress: Progress | None = None, loaded: LoadedModel | None = None, world: World | None = None
) -> AngularResult:
    """Load the model (unless given), build the windows, measure, and return the result.

    Under `accelerate launch`/`torchrun` (see layerprobe.distributed) every rank measures a share of the
    batches and every rank returns the same, whole result; the caller writes it on rank 0 only.
    """
    progress = progress or Progress()
    world = world or distributed_world()
    timer = RunTimer()
    if loaded is None:
        progress.stage("Loading model")
        loaded = load_model(spec.model, purpose="base")
    stack = find_layers(loaded.model, spec.model.layers_path)
    seq_len = spec.corpus.seq_len
    if loaded.context_length:
        seq_len = min(seq_len, loaded.context_length)
    progress.stage("Reading corpus", spec.corpus.tokens, "tok")
    windows = build_windows(
        loaded.tokenizer, iter_documents(spec.corpus), spec.corpus.tokens, seq_len, on_tokens=progress.on_advance
    )
    progress.stage("Measuring", spec.corpus.tokens, "tok")
    measure_clock = time.perf_counter()
    accumulator = measure(loaded, stack, windows, spec.positions, spec.batch_size, progress.on_advance, world)
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
        nonfinite_tokens=accumulator.nonfinite,
        run=timer.finish(loaded.device_label),
        tokens_per_second=data["tokens"] / measure_seconds if measure_seconds > 0 else 0.0,
    )
