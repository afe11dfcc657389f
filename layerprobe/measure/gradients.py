"""Gradient norm of each block's (and each sublayer's) parameters for the model's own loss over the corpus.

The quantity is ‖∇θ_l L̄‖ with L̄ the MEAN loss over every predicted position of the corpus (Mix-LN's
per-layer gradient norms): next-token cross-entropy for causal LMs, masked-LM cross-entropy for encoders
(15 % of each window's non-special tokens chosen with a per-window seed, of which 80 % become [MASK],
10 % a random token, 10 % stay; so the masks do not depend on the batch size). Batches are backpropagated
as summed losses; each parameter's gradient is added to a float32 accumulator the moment it is ready and
then freed, and the sum is divided by the total number of positions at the end, so the result is
independent of the batch size. Peak memory: the weights, one float32 accumulator per block parameter,
and one batch's activations and logits kept for its backward pass.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from layerprobe.core import UnsupportedModel
from layerprobe.data import Window, batches
from layerprobe.model import CAUSAL_LM, MASKED_LM, LayerStack, LoadedModel, takes_argument
from layerprobe.results import GradNorms

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedTokenizerBase

MASK_FRACTION = 0.15
DEFAULT_MASK_SEED = 1234


@contextlib.contextmanager
def accumulated_block_grads(stack: LayerStack) -> Iterator[list[dict[str, torch.Tensor]]]:
    """Sum every block parameter's gradient into float32 buffers, freeing `.grad` as soon as it lands.

    Only block parameters require grad inside (embeddings and head are frozen: their gradients are not
    measured, and skipping them saves their memory); every `requires_grad` flag is restored on exit.
    Yields, per block, {parameter name relative to the block: float32 accumulator}.
    """
    import torch

    model = stack.root
    flags = [(p, p.requires_grad) for p in model.parameters()]
    sums: list[dict[str, torch.Tensor]] = []
    handles = []
    try:
        for p in model.parameters():
            p.requires_grad_(False)
        for block in stack.blocks:
            buffers = {}
            for name, param in block.named_parameters():
                param.requires_grad_(True)
                buffers[name] = torch.zeros(param.shape, dtype=torch.float32, device=param.device)

                def add(p: torch.Tensor, buffer: torch.Tensor = buffers[name]) -> None:
                    assert p.grad is not None  # the hook runs once the gradient has landed
                    buffer.add_(p.grad.detach().float())
                    p.grad = None

                handles.append(param.register_post_accumulate_grad_hook(add))
            sums.append(buffers)
        yield sums
    finally:
        for handle in handles:
            handle.remove()
        for p, flag in flags:
            p.requires_grad_(flag)
            p.grad = None


def mask_window(
    ids: list[int], index: int, seed: int, tokenizer: PreTrainedTokenizerBase
) -> tuple[list[int], list[int]]:
    """BERT's masking of one window, reproducible from (seed, window index) alone.

    Returns the input ids and the labels (-100 where no prediction is made).
    """
    import torch

    special = set(tokenizer.all_special_ids)
    candidates = [i for i, t in enumerate(ids) if t not in special]
    generator = torch.Generator().manual_seed(seed * 1_000_003 + index)
    count = max(1, round(MASK_FRACTION * len(candidates))) if candidates else 0
    order = torch.randperm(len(candidates), generator=generator).tolist()[:count]
    chosen = sorted(candidates[i] for i in order)
    action = torch.rand(len(chosen), generator=generator).tolist()
    vocab = len(tokenizer)
    random_ids = torch.randint(0, vocab, (len(chosen),), generator=generator).tolist()
    inputs, labels = list(ids), [-100] * len(ids)
    for position, a, r in zip(chosen, action, random_ids, strict=True):
        labels[position] = ids[position]
        if a < 0.8:
            inputs[position] = tokenizer.mask_token_id
        elif a < 0.9:
            inputs[position] = r
    return inputs, labels


def loss_sum(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Summed cross-entropy over positions whose label is not -100, and how many there are.

    Args:
        logits: (batch, seq, vocab).
        labels: (batch, seq) target ids aligned with logits, -100 where nothing is predicted.
    """
    import torch.nn.functional as F

    keep = labels != -100
    total = F.cross_entropy(logits[keep].float(), labels[keep], reduction="sum")
    return total, int(keep.sum())


def grad_norms(
    loaded: LoadedModel,
    stack: LayerStack,
    windows: list[Window],
    batch_size: int,
    param_groups: list[dict[str, tuple[str, ...]] | None],
    seed: int = DEFAULT_MASK_SEED,
    on_batch: Callable[[int], None] | None = None,
) -> GradNorms:
    """One forward and backward pass over the windows; ‖∇ mean loss‖ per block and per sublayer.

    Args:
        loaded: a model loaded with its LM head (purpose causal-lm or masked-lm).
        stack: its blocks.
        windows: the corpus windows.
        batch_size: windows per pass (does not change the result).
        param_groups: per block, {sublayer kind: parameter names relative to the block}, or None.
        seed: masking seed for masked-LM.
        on_batch: called with the number of tokens after each batch.
    """
    import torch

    kind = CAUSAL_LM if loaded.kind == CAUSAL_LM else MASKED_LM
    if kind == MASKED_LM and getattr(loaded.tokenizer, "mask_token_id", None) is None:
        raise UnsupportedModel(f"{loaded.spec.model}'s tokenizer has no mask token, so no masked-LM loss.")
    device = loaded.input_device
    extra = {"use_cache": False} if takes_argument(loaded.model, "use_cache") else {}
    if device is not None and getattr(device, "type", "") == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    total_loss, positions, index = 0.0, 0, 0
    with torch.enable_grad(), accumulated_block_grads(stack) as sums:
        for group in batches(windows, batch_size):
            ids = torch.tensor([w.input_ids for w in group], device=device)
            if kind == CAUSAL_LM:
                inputs = ids
                labels = torch.full_like(ids, -100)
                labels[:, :-1] = ids[:, 1:]
            else:
                pairs = [mask_window(w.input_ids, index + i, seed, loaded.tokenizer) for i, w in enumerate(group)]
                inputs = torch.tensor([p[0] for p in pairs], device=device)
                labels = torch.tensor([p[1] for p in pairs], device=device)
            index += len(group)
            logits = loaded.model(input_ids=inputs, **extra).logits
            loss, count = loss_sum(logits, labels.to(logits.device))
            if count:
                loss.backward()
                total_loss += float(loss.detach())
                positions += count
            del logits, loss
            if on_batch:
                on_batch(int(ids.numel()))
        block_norms, sub_norms = _norms(sums, param_groups, positions)
    peak = None
    if device is not None and getattr(device, "type", "") == "cuda":
        peak = int(torch.cuda.max_memory_allocated(device))
    accumulator_bytes = 4 * sum(p.numel() for p in stack.blocks.parameters())
    return GradNorms(
        loss="next-token" if kind == CAUSAL_LM else "masked-lm",
        mean_loss=total_loss / positions if positions else math.nan,
        positions=positions,
        block=block_norms,
        sublayers=sub_norms,
        settings={
            "mask_fraction": MASK_FRACTION if kind == MASKED_LM else None,
            "mask_seed": seed if kind == MASKED_LM else None,
            "accumulator_bytes": accumulator_bytes,
        },
        peak_memory_bytes=peak,
    )


def _norms(
    sums: list[dict[str, torch.Tensor]], groups: list[dict[str, tuple[str, ...]] | None], positions: int
) -> tuple[list[float], dict[str, list[float | None]] | None]:
    """‖Σ grad‖ / positions per block and per named parameter group, squared norms summed in float64."""
    if positions == 0:
        nan = [math.nan] * len(sums)
        return nan, None
    squares = [{name: float(buf.double().pow(2).sum()) for name, buf in block.items()} for block in sums]
    block_norms = [math.sqrt(sum(sq.values())) / positions for sq in squares]
    kinds = sorted({k for g in groups if g for k in g}, key=("attention", "mlp").index)
    if not kinds:
        return block_norms, None
    subs: dict[str, list[float | None]] = {k: [] for k in kinds}
    for sq, group in zip(squares, groups, strict=True):
        for k in kinds:
            names = group.get(k) if group else None
            subs[k].append(None if names is None else math.sqrt(sum(sq[n] for n in names)) / positions)
    return block_norms, subs
