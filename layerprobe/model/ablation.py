"""What "remove unit l" means, as context managers any metric can use: a block, a span of blocks, or a sublayer.

prune-drop scores one variant per start index l; `Ablation` says what that variant takes out:
- unit "block", span n: blocks [l, l+n) leave the model (`removal.removed_blocks`), so x^l goes straight
  to block l+n (Gromov et al.'s pruning, matching angular's d(x^l, x^(l+n)));
- unit "attention" or "mlp": block l stays, but that sublayer's output is zero. This is exactly what
  zeroing its output projection (and bias) would give: for a Pre-LN block the residual passes unchanged,
  for a Post-LN block the norm still applies to the residual, for a parallel block only that branch
  vanishes, and for an MoE MLP every routed and shared expert goes (the hooked module outputs their sum).

The sublayers are found by tracing the data flow (`sublayers.find_model_sublayers`), never from a table
of module names. A forward hook replaces the sublayer module's hidden-state output with zeros of the
same shape and keeps the rest of its output (attention weights, router logits) as it was.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Union, cast

from layerprobe.core import UNITS, LayerprobeError, UnsupportedModel, check_ablation
from layerprobe.model.removal import removed_blocks
from layerprobe.model.stack import BlockArgs, LayerStack
from layerprobe.model.sublayers import BlockSublayers, Sublayer, find_model_sublayers

if TYPE_CHECKING:
    import torch
    from torch import nn
    from transformers import PreTrainedModel
    from transformers.utils import ModelOutput

# What a sublayer module returns: its hidden states, alone or first among other outputs (attention weights,
# router logits).
SublayerOutput = Union["torch.Tensor", "tuple[torch.Tensor, ...]", "list[torch.Tensor]", "ModelOutput"]

BLOCK, ATTENTION, MLP = UNITS
_PROBE_TOKENS = 8  # tokens of the one forward pass that locates the sublayers


@dataclass(frozen=True)
class Ablation:
    """What one prune-drop variant removes, given its start index l (see the module docstring)."""

    unit: str = BLOCK
    span: int = 1

    def __post_init__(self) -> None:
        check_ablation(self.unit, self.span)

    @property
    def is_sublayer(self) -> bool:
        return self.unit != BLOCK

    def starts(self, num_layers: int, selected: Sequence[int]) -> list[int]:
        """The selected start indices that leave a whole span inside the model: l <= L − n."""
        if self.span > num_layers:
            raise LayerprobeError(f"--span {self.span} is longer than the model's {num_layers} blocks.")
        return [layer for layer in selected if layer + self.span <= num_layers]

    def blocks(self, start: int) -> list[int]:
        """The blocks a variant touches: [l, l+n) for a span, [l] otherwise."""
        return list(range(start, start + self.span))


def span_blocks(start: int, n: int) -> list[int]:
    """Blocks [start, start+n): the span whose removal angular's d(x^start, x^(start+n)) predicts."""
    return list(range(start, start + n))


@contextlib.contextmanager
def removed_span(stack: LayerStack, start: int, n: int) -> Iterator[LayerStack]:
    """Blocks [start, start+n) taken out of the model in memory (see `removal.removed_blocks`)."""
    if start < 0 or start + n > stack.num_layers:
        raise UnsupportedModel(f"Cannot remove blocks {start}…{start + n - 1}: the model has {stack.num_layers}.")
    with removed_blocks(stack, span_blocks(start, n)) as shrunk:
        yield shrunk


def zero_hidden(output: SublayerOutput) -> SublayerOutput:
    """A module output with its hidden states (the tensor, or the first element) replaced by zeros."""
    import torch

    if isinstance(output, torch.Tensor):
        return torch.zeros_like(output)
    if isinstance(output, tuple):
        return (torch.zeros_like(output[0]), *output[1:])
    if isinstance(output, list):
        return [torch.zeros_like(output[0]), *output[1:]]
    if hasattr(output, "to_tuple"):  # a ModelOutput: keep its class and other fields
        first = next(iter(output.keys()))
        output[first] = torch.zeros_like(output[first])
        return output
    raise UnsupportedModel(f"A sublayer returned {type(output).__name__}; cannot zero its output.")


def _zero_hook(_module: nn.Module, _args: BlockArgs, output: SublayerOutput) -> SublayerOutput:
    """A forward hook that replaces a sublayer's hidden-state output with zeros."""
    return zero_hidden(output)


def sublayer_module(block: nn.Module, sublayers: BlockSublayers, unit: str) -> nn.Module:
    """The module of `block` whose output is its `unit` ("attention"/"mlp") contribution."""
    sublayer: Sublayer = getattr(sublayers, unit)
    return block.get_submodule(sublayer.module)


@contextlib.contextmanager
def zeroed_sublayers(blocks: Sequence[nn.Module], sublayers: Sequence[BlockSublayers], unit: str) -> Iterator[None]:
    """Zero the `unit` sublayer output of each of `blocks` (with its `BlockSublayers`) while inside."""
    handles = [
        sublayer_module(block, subs, unit).register_forward_hook(_zero_hook)
        for block, subs in zip(blocks, sublayers, strict=True)
    ]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


@contextlib.contextmanager
def ablated(
    stack: LayerStack, unit: str, indices: Sequence[int], sublayers: Sequence[BlockSublayers] | None = None
) -> Iterator[LayerStack]:
    """Remove `unit` of the blocks at `indices` in memory; everything is restored on exit.

    Args:
        stack: the model's blocks (`stack.find_layers`).
        unit: "block" (blocks leave the model), "attention" or "mlp" (that sublayer's output is zero).
        indices: block indices; for a span pass `range(l, l+n)` with unit "block".
        sublayers: every block's `BlockSublayers` (`locate_sublayers`); needed for a sublayer unit.

    Yields the stack as the model now runs it (shrunk for blocks, unchanged for sublayers).
    """
    if unit not in UNITS:
        raise LayerprobeError(f"Unknown unit {unit!r}.", hint=f"Use one of {', '.join(UNITS)}.")
    if unit == BLOCK:
        with removed_blocks(stack, list(indices)) as shrunk:
            yield shrunk
        return
    if sublayers is None:
        raise LayerprobeError(f"Ablating {unit} sublayers needs the sublayers located first (locate_sublayers).")
    if not set(indices) <= set(range(stack.num_layers)):
        raise UnsupportedModel(f"Cannot ablate blocks {sorted(indices)}: the model has {stack.num_layers}.")
    with zeroed_sublayers([stack.blocks[i] for i in indices], [sublayers[i] for i in indices], unit):
        yield stack


def locate_sublayers(model: PreTrainedModel, stack: LayerStack) -> list[BlockSublayers]:
    """Every block's attention and MLP sublayers, traced from one short forward pass of `model`.

    Raises `UnsupportedModel` (a clear one-line error) when a block does not add one attention and one
    MLP output to its residual stream.
    """
    import torch

    vocab = getattr(getattr(model, "config", None), "vocab_size", None) or 2
    device = cast("torch.Tensor", model.get_input_embeddings().weight).device
    ids = torch.tensor([[(7919 * i + 3) % vocab for i in range(_PROBE_TOKENS)]], device=device)
    try:
        return find_model_sublayers(model, stack, ids)
    except UnsupportedModel as exc:
        raise UnsupportedModel(
            f"Cannot find the attention and MLP sublayers of this model: {exc.message}",
            hint="Use --unit block, which needs no sublayers.",
        ) from exc


@dataclass(frozen=True)
class Remover:
    """One prune-drop run's ablation bound to its model: `variant(l)` applies "remove unit l" in memory.

    Built once per run (`for_model`), so the sublayers are traced once, and handed to every scorer.
    """

    stack: LayerStack
    ablation: Ablation = Ablation()
    sublayers: tuple[BlockSublayers, ...] | None = None

    @classmethod
    def for_model(cls, model: PreTrainedModel, stack: LayerStack, unit: str = BLOCK, span: int = 1) -> Remover:
        ablation = Ablation(unit, span)
        sublayers = tuple(locate_sublayers(model, stack)) if ablation.is_sublayer else None
        return cls(stack, ablation, sublayers)

    @contextlib.contextmanager
    def variant(self, layer: int | None) -> Iterator[None]:
        """The model with unit `layer` removed (None: the baseline, untouched)."""
        if layer is None:
            yield
            return
        with ablated(self.stack, self.ablation.unit, self.ablation.blocks(layer), self.sublayers):
            yield

    def module_paths(self) -> list[dict[str, str]] | None:
        """Per block, the attention and MLP module paths (relative to the block) the tracing found."""
        if self.sublayers is None:
            return None
        return [{ATTENTION: s.attention.module, MLP: s.mlp.module} for s in self.sublayers]
