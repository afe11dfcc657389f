"""Per-window NLL, KL(full ‖ variant) and top-1 agreement of a variant's predictions against the full model's.

Two shapes of predictions: final hidden states of every position, to which the LM head is applied in
slices (`compare_next_token`: at most `LOGIT_BYTES` of logits alive at once), and logits already reduced
to the scored positions (`compare_logits`: a masked LM's masked tokens, an image classifier's classes).
Either way a window's value is the mean over its scored positions, in float64.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from layerprobe.evaluate.replay import head_logits

if TYPE_CHECKING:
    from transformers import PreTrainedModel

LOGIT_BYTES = 256 * 1024**2  # logits (base and variant, float32) alive at once per slice of positions
PerWindow = dict[str, list[float]]


def compare_next_token(
    model: PreTrainedModel, base_final: torch.Tensor, final: torch.Tensor, ids: torch.Tensor, shift: int = 1
) -> PerWindow:
    """Per-window mean NLL, KL(base ‖ variant) and top-1 agreement, from final hidden states.

    The state at position t predicts token t + `shift` (1: a causal LM; 0: a teacher-forced decoder).
    Positions are sliced so that base and variant logits of at most `LOGIT_BYTES` exist at once.
    """
    rows, width = ids.shape[0], ids.shape[1] - shift
    vocab = model.get_output_embeddings().weight.shape[0]
    per_slice = max(1, LOGIT_BYTES // (4 * 4 * vocab))  # base + variant logits and their log-softmaxes
    sums = {k: torch.zeros(rows, dtype=torch.float64, device=final.device) for k in ("nll", "kl", "top1")}
    flat_base = base_final[:, :width].reshape(rows * width, -1)
    flat_var = final[:, :width].reshape(rows * width, -1)
    targets = ids[:, shift:].reshape(-1).to(final.device)
    owner = torch.arange(rows, device=final.device).repeat_interleave(width)
    for start in range(0, rows * width, per_slice):
        part = slice(start, start + per_slice)
        base = nn.functional.log_softmax(head_logits(model, flat_base[part]).float(), dim=-1)
        var = nn.functional.log_softmax(head_logits(model, flat_var[part]).float(), dim=-1)
        _add(sums, base, var, targets[part], owner[part])
    return {k: (v / width).tolist() for k, v in sums.items()}


def compare_logits(
    base_logits: torch.Tensor, logits: torch.Tensor, owner: torch.Tensor, rows: int, targets: torch.Tensor | None
) -> PerWindow:
    """Per-window means over scored positions (N, classes) whose window is `owner` (N,) of `rows` windows.

    With `targets` (the true token of each position) the NLL too; without (an image's classes) KL and top-1.
    """
    device = logits.device
    owner = owner.to(device)
    keys = ("nll", "kl", "top1") if targets is not None else ("kl", "top1")
    sums = {k: torch.zeros(rows, dtype=torch.float64, device=device) for k in keys}
    base = nn.functional.log_softmax(base_logits.to(device).float(), dim=-1)
    var = nn.functional.log_softmax(logits.float(), dim=-1)
    _add(sums, base, var, None if targets is None else targets.to(device), owner)
    counts = torch.bincount(owner, minlength=rows).double().clamp(min=1)
    return {k: (v / counts).tolist() for k, v in sums.items()}


def _add(
    sums: dict[str, torch.Tensor],
    base: torch.Tensor,
    var: torch.Tensor,
    targets: torch.Tensor | None,
    owner: torch.Tensor,
) -> None:
    """Add each position's NLL (when `sums` has it), KL(base ‖ variant) and top-1 agreement to its window's sum."""
    values = {
        "kl": (base.exp() * (base - var)).sum(-1),
        "top1": (base.argmax(-1) == var.argmax(-1)).double(),
    }
    if "nll" in sums and targets is not None:
        values["nll"] = -var.gather(1, targets[:, None]).squeeze(1)
    for key, value in values.items():
        sums[key].index_add_(0, owner, value.double())
