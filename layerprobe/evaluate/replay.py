"""The shared-prefix engine's stand-ins: a recorded x^l replayed in place of block l, and the LM head on its own.

Removing block l from a recorded pass means: run blocks l+1 … L-1 from x^l. Both the shared-prefix
engine (evaluate/shared.py) and the corpus metric (evaluate/corpus_metric.py) do that by putting a
`Replay` in block l's slot of a shrunk stack, shaped like the block's real output (`output_arity`),
and by applying `head_logits` to the final hidden states of only the positions they score;
`verify_head` checks, once per model, that the head on its own gives the model's own logits.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
from torch import nn

from layerprobe.model import LayerStack, base_of, hidden_from_output

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase
    from transformers.cache_utils import Cache

# What a block returns: its hidden states bare, or first in a tuple (attention weights, cache… after them).
BlockOutput = torch.Tensor | tuple[torch.Tensor | None, ...]


class Replay(nn.Module):
    """Stands in for block l: returns the recorded x^l, shaped like the real block's output.

    `like`: the block it stands in for, whose plain attributes it copies (`mirror_attributes`).
    """

    def __init__(self, states: torch.Tensor, output_arity: int | None, like: nn.Module | None = None) -> None:
        super().__init__()
        if like is not None:
            mirror_attributes(self, like)
        self.states, self.output_arity = states, output_arity

    def forward(self, *args: object, **kwargs: object) -> BlockOutput:  # whatever the replaced block was given
        """The recorded states, in the real block's output shape; the block's inputs are ignored."""
        if self.output_arity is None:
            return self.states
        return (self.states,) + (None,) * (self.output_arity - 1)


def mirror_attributes(stand_in: nn.Module, block: nn.Module) -> None:
    """Give a stand-in the block's plain attributes (str, int, float, bool): some models read them between blocks.

    Nemotron-H picks each block's mask by `block.block_type`; a stand-in without it would stop the model.
    """
    for name, value in vars(block).items():
        if not name.startswith("_") and name != "training" and isinstance(value, (str, int, float, bool)):
            setattr(stand_in, name, value)


def output_arity(stack: LayerStack, ids: torch.Tensor, forward: Callable[[torch.Tensor], object]) -> int | None:
    """How a block returns its hidden states: None for a bare tensor, else the tuple length.

    `forward` runs the model on input ids; it is called once on a two-token slice of `ids`.
    """
    seen: list[BlockOutput] = []
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


def verify_head(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, atol: float = 1e-4) -> str | None:
    """Compare the engine's head path with the model's own forward on a short text; None if they agree."""
    device = model.get_input_embeddings().weight.device
    ids = tokenizer("The quick brown fox jumps over the lazy dog.", return_tensors="pt")["input_ids"]
    ids = ids[:, : max(2, min(ids.shape[1], 16))].to(device)
    try:
        with torch.inference_mode():
            expected = model(input_ids=ids, use_cache=False).logits[0].float().log_softmax(-1)
            final = base_of(model)(input_ids=ids, use_cache=False).last_hidden_state[0]
            got = head_logits(model, final).float().log_softmax(-1)
    except Exception as exc:  # remote-code models may not split into base model + head at all
        return f"its base model and head cannot be run separately ({type(exc).__name__}: {exc})"
    if got.shape != expected.shape:
        return f"its head gives {tuple(got.shape)} logits where the model gives {tuple(expected.shape)}"
    if not torch.allclose(got, expected, atol=atol, rtol=1e-4):
        return (
            f"its head does something after the output embedding that layerprobe does not reproduce "
            f"(max difference {float((got - expected).abs().max()):.2e})"
        )
    return None


def cache_keyword(model: nn.Module) -> str:
    """The name under which `model.forward` takes its key/value cache: `cache`, or `past_key_values` before.

    transformers 5 renamed the argument (the old name still works but warns that it "will be removed in
    version 5.40.0"); the oldest supported version (4.56) knows only `past_key_values`. The signature
    decides, so the engine keeps working on both and prints no library warning.
    """
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def filled_cache(output: object) -> Cache:
    """The cache a forward pass returned: `output.cache` (transformers 5), else `output.past_key_values`."""
    cache = getattr(output, "cache", None)
    return cache if cache is not None else getattr(output, "past_key_values")  # noqa: B009 (one name per version)
