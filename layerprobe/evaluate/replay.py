"""The shared-prefix engine's stand-ins: a recorded x^l replayed in place of block l, and the LM head on its own.

Removing block l from a recorded pass means: run blocks l+1 … L-1 from x^l. Both the shared-prefix
engine (evaluate/shared.py) and the corpus metric (evaluate/corpus_metric.py) do that by putting a
`Replay` in block l's slot of a shrunk stack, shaped like the block's real output (`output_arity`),
and by applying `head_logits` to the final hidden states of only the positions they score.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from layerprobe.model import LayerStack, hidden_from_output

if TYPE_CHECKING:
    from transformers import PreTrainedModel


class Replay(nn.Module):
    """Stands in for block l: returns the recorded x^l, shaped like the real block's output."""

    def __init__(self, states: torch.Tensor, output_arity: int | None) -> None:
        super().__init__()
        self.states, self.output_arity = states, output_arity

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if self.output_arity is None:
            return self.states
        return (self.states,) + (None,) * (self.output_arity - 1)


def output_arity(stack: LayerStack, ids: torch.Tensor, forward: Any) -> int | None:
    """How a block returns its hidden states: None for a bare tensor, else the tuple length."""
    seen: list[Any] = []
    handle = stack.blocks[0].register_forward_hook(lambda _m, _a, output: seen.append(output))
    try:
        forward(ids[:1, :2])
    finally:
        handle.remove()
    output = seen[0]
    hidden_from_output(output)  # raises if the block's output has no recognisable hidden states
    return None if isinstance(output, torch.Tensor) else len(output)


def head_logits(model: PreTrainedModel, hidden: torch.Tensor) -> torch.Tensor:
    """The causal LM's logits for final hidden states (N, hidden) → (N, vocab).

    Applies the output embedding and the logit transforms some families add after it (soft-capping,
    scaling); `verify_head` checks the result against the model's own forward before the engine is used.
    """
    logits = model.get_output_embeddings()(hidden)
    config = model.config
    scale = getattr(config, "logit_scale", None)
    if isinstance(scale, (int, float)):
        logits = logits * scale
    scaling = getattr(config, "logits_scaling", None)
    if isinstance(scaling, (int, float)):
        logits = logits / scaling
    cap = getattr(config, "final_logit_softcapping", None)
    if isinstance(cap, (int, float)) and cap:
        logits = torch.tanh(logits / cap) * cap
    return logits
