"""What the measured residual stream of a stack is, where its blocks do not pass one stream each run.

Two designs need a rule, both read from the stack's config, never from names:

- **AltUp (Gemma-3n)**: every block passes `altup_num_inputs` streams of each position, stacked on a
  leading axis. Each block computes attention and MLP on one of them only, the prediction at index
  `altup_active_idx`, and writes its output back there (AltUp's "correct" step sets that stream to the
  block's output when its correction coefficients are zero); the other streams are cheap linear
  predictions of it that the block never runs on, and the router and the final norm's target magnitude read
  the active stream. So the residual stream measured is the active one: x^l = hidden_states[altup_active_idx].
- **image-only blocks (mllama)**: blocks listed in the text config's `cross_attention_layers` attend to an
  image and are skipped by a text-only pass. They are *absent*: x^l of such a block does not exist in
  that pass (the state flowing past it is x^(l+1)), so every distance from or to x^l is unmeasured, and the
  distance across it is between the blocks before and after it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from layerprobe.core import UnsupportedModel
from layerprobe.model.stack import LayerStack
from layerprobe.model.towers import TEXT, tower_of

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class AltUpStream:
    """The stream of Gemma-3n's AltUp that is measured: `index` of `count` (the config's `altup_active_idx`)."""

    index: int
    count: int

    @property
    def record(self) -> str:
        """What a result records as `model.stream` and the terminal says in one line."""
        return (
            f"AltUp stream {self.index} of {self.count} (altup_active_idx): the prediction each block computes "
            "on and writes its output to"
        )


def altup_stream(stack: LayerStack) -> AltUpStream | None:
    """The active AltUp stream of a Gemma-3n text stack, None for a stack that passes one stream."""
    config = getattr(stack.root, "config", None)
    config = getattr(config, "text_config", config)
    count, index = getattr(config, "altup_num_inputs", None), getattr(config, "altup_active_idx", None)
    if not isinstance(count, int) or not isinstance(index, int) or count < 2:
        return None
    return AltUpStream(index, count)


def image_only_blocks(stack: LayerStack) -> tuple[int, ...]:
    """Blocks of a text stack that run only with an image (mllama's cross-attention), in order; () for most."""
    config = getattr(stack.root, "config", None)
    text_config = getattr(config, "text_config", config)
    listed = getattr(text_config, "cross_attention_layers", None) or []
    if tower_of(stack).role != TEXT:
        return ()
    return tuple(sorted(int(i) for i in listed if 0 <= int(i) < stack.num_layers))


def untraceable_image_block(path: str, block: int) -> UnsupportedModel:
    """The one-line refusal of sublayer units on a stack with image-only blocks: their sublayers never run text-only.

    Raised from the config before any weight loads (prune's preflight, on a weightless skeleton), and after
    a traced pass where a block did not run (`sublayers.find_model_sublayers`), in the same words.
    """
    return UnsupportedModel(
        f"Block {block} of {path!r} runs only with an image, so a text-only pass cannot trace its attention and MLP.",
        hint="Remove whole blocks (--unit block).",
    )


def skipped_note(stack: LayerStack) -> str | None:
    """The one line saying which blocks a text-only pass skips and what is measured instead; None if none."""
    skipped = image_only_blocks(stack)
    if not skipped:
        return None
    blocks = ", ".join(map(str, skipped))
    one = len(skipped) == 1
    return (
        f"Block{'' if one else 's'} {blocks} of {stack.path!r} {'is a' if one else 'are'} cross-attention "
        f"block{'' if one else 's'} that run{'s' if one else ''} only with an image: a text-only pass skips "
        f"{'it' if one else 'them'}, so distances from {'its' if one else 'their'} input are unmeasured and a "
        "distance across one is between the blocks before and after it."
    )


def stream_note(stack: LayerStack) -> str | None:
    """The one line saying which AltUp stream is measured; None for a stack that passes one stream."""
    stream = altup_stream(stack)
    return None if stream is None else f"Measuring {stream.record}."


def residual_view(stack: LayerStack, state: torch.Tensor) -> torch.Tensor:
    """The residual stream of one captured state: the active AltUp stream where the blocks pass several."""
    stream = altup_stream(stack)
    if stream is None or state.dim() != 4 or state.shape[0] != stream.count:
        return state
    return state[stream.index]
