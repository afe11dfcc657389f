"""Where a removed span's linear map folds into the weights that remain, exactly, and the fold itself.

The block before the cut (l = start − 1) ends by adding its contribution c to the residual: the MLP's
output in a Pre-LN block (x^start = h + c, with h the residual after attention), attention + MLP in a
parallel block (x^start = x^l + attn + mlp). Both are linear in the weights of their last projection
(y = W a + b): replacing W by (I + T) W and b by (I + T) b makes the block write c + T c, which is the
pruned model with the span stood in for by T. A mixture of experts adds Σ_e g_e (W_e a_e + b_e) and a
gated shared expert; every term is linear, so every expert's and the shared expert's down-projection
take the same fold. That is exact only because nothing comes between c and the residual: a Post-LN
block normalises h + c (T c would have to pass through the norm) and a sandwich block (Gemma-2/3)
normalises c itself, so both are refused with one line. Where the projections are is found from the
block's data flow (`detect_placement`), never from names, and every fold is checked numerically on a
recorded call of the block before it is trusted (`check_fold`).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from layerprobe.core import UnsupportedModel
from layerprobe.model import (
    BlockSublayers,
    LayerStack,
    altup_stream,
    capture_block_states,
    detect_placement,
    image_only_blocks,
)
from layerprobe.results import PARALLEL, POST_LN, PRE_LN, SANDWICH

if TYPE_CHECKING:
    import torch
    from torch import nn

# How a folded parameter holds the output dimension (d) of its projection.
OUT_IN = "out_in"  # nn.Linear weight (d, k): y = W a
IN_OUT = "in_out"  # Conv1D weight (k, d): y = a W (GPT-2)
BIAS = "bias"  # (d,)
EXPERTS_OUT_IN = "experts_out_in"  # fused experts (E, d, k): y_e = W_e a_e
EXPERTS_IN_OUT = "experts_in_out"  # fused experts (E, k, d): y_e = a_e W_e
WIRINGS = {PRE_LN: "pre-ln", PARALLEL: "parallel"}
# The names families give an expert's output projection; where one matches, only those are folded (shapes
# alone cannot tell a down projection from a gate when the widths coincide). check_fold verifies either way.
_OUTPUT_NAMES = re.compile(r"(^|\.)(down_proj|w2|fc2|c_proj|dense_4h_to_h|wo|out_proj)(\.|$)")


@dataclass(frozen=True)
class FoldTarget:
    """One parameter of the block before the cut that the fold rewrites: its name in the block, its layout."""

    name: str
    layout: str


@dataclass(frozen=True)
class FoldSite:
    """A removed span [start, end) and where its map folds: block start − 1's last projection(s).

    `contribution` is the module path (in the block) whose output c the map reads for a Pre-LN block;
    None for a parallel block, whose c is the block's output minus its input.
    """

    start: int
    end: int
    wiring: str
    contribution: str | None
    targets: tuple[FoldTarget, ...]

    @property
    def block(self) -> int:
        return self.start - 1


def spans_of(removed: Sequence[int]) -> list[tuple[int, int]]:
    """The maximal runs of consecutive removed blocks, as [start, end)."""
    spans: list[tuple[int, int]] = []
    for index in sorted(set(removed)):
        if spans and spans[-1][1] == index:
            spans[-1] = (spans[-1][0], index + 1)
        else:
            spans.append((index, index + 1))
    return spans


def fold_spans(removed: Sequence[int], absent: Sequence[int] = ()) -> list[tuple[int, int]]:
    """The spans [start, end) whose map folds into block start − 1: `spans_of`, across the blocks a pass skips.

    An `absent` block (mllama's image-only blocks, which a text-only pass skips: `streams.image_only_blocks`)
    passes its input on unchanged, so removed blocks with only absent blocks between them are one span of
    the text-only pass, and a span opens at the absent blocks right before it: block start − 1 is then the
    last block that runs and is kept, the one whose output flows into the cut.
    """
    gone, skipped = set(removed), set(absent)
    spans: list[tuple[int, int]] = []
    opened: int | None = None
    for index in range(max(gone | skipped, default=-1) + 1):
        if index in gone or index in skipped:
            opened = index if opened is None else opened
            if index in gone:
                if spans and spans[-1][0] == opened:
                    spans[-1] = (opened, index + 1)
                else:
                    spans.append((opened, index + 1))
        else:
            opened = None
    return spans


def refuse_first_block(removed: Sequence[int], absent: Sequence[int] = ()) -> None:
    """A span that starts at block 0 has no block before it to fold into: refused before any weight loads."""
    if any(start == 0 for start, _ in fold_spans(removed, absent)):
        raise UnsupportedModel(
            "--method linear folds each removed span's map into the block before it; block 0 has none.",
            hint="Keep block 0 (remove from block 1 on), or heal with --method lora.",
        )


def refuse_streams(stack: LayerStack) -> None:
    """AltUp (Gemma-3n) cannot take the fold: refused from the config (a weightless skeleton), before any weight.

    A Gemma-3n block does not add a projection's output to one residual: it normalises its MLP's output
    (sandwich norm), then AltUp's correct step scales the change it made to the active stream by coefficients
    routed from that very output and adds it to every stream, and the per-layer input adds a gated function
    of the corrected active stream to the others. No weight of the block makes it write x + c + T c on the
    active stream while leaving the other streams as the fit assumed, so no map folds exactly.
    """
    stream = altup_stream(stack)
    if stream is not None:
        raise UnsupportedModel(
            "The linear fold (--method linear, linear+lora) puts a map into the block before the cut, and AltUp "
            f"blocks (Gemma-3n, {stream.count} streams) pass what they compute through a norm and a routed "
            "correction into every stream: no map of the active stream folds into their weights exactly.",
            hint="Heal this model with --method lora.",
        )


def find_sites(model: nn.Module, stack: LayerStack, removed: Sequence[int], probe_ids: torch.Tensor) -> list[FoldSite]:
    """The fold site of every removed span, or one line saying why this architecture cannot take the fold."""
    placement, sublayers = detect_placement(model, stack, probe_ids)
    width = hidden_width(model, stack, probe_ids)
    sites = []
    for start, end in fold_spans(removed, image_only_blocks(stack)):
        block = start - 1
        label = placement.blocks[block].label
        if label == POST_LN:
            raise UnsupportedModel(
                f"Block {block} is Post-LN: it normalises h + MLP(h), so a map of the MLP's output cannot be folded "
                "into the weights without passing through that norm.",
                hint="Heal Post-LN models with --method lora.",
            )
        if label == SANDWICH:
            raise UnsupportedModel(
                f"Block {block} normalises its MLP's output before adding it (sandwich norm, Gemma-2/3): a map of "
                "what it adds does not fold into the down-projection before that norm.",
                hint="Heal sandwich-norm models with --method lora.",
            )
        subs = sublayers[block]
        if label not in WIRINGS or subs is None:
            reason = placement.blocks[block].reason or label
            raise UnsupportedModel(
                f"Block {block}'s wiring is not one the linear fold is exact for ({reason}).",
                hint="The fold takes Pre-LN and parallel-residual blocks; heal others with --method lora.",
            )
        sites.append(_site(stack.blocks[block], subs, start, end, WIRINGS[label], width))
    return sites


def _site(block: nn.Module, subs: BlockSublayers, start: int, end: int, wiring: str, width: int) -> FoldSite:
    if wiring == "parallel":
        targets = _targets(block, subs.attention.modules, width) + _targets(block, subs.mlp.modules, width)
        return FoldSite(start, end, wiring, None, targets)
    return FoldSite(start, end, wiring, subs.mlp.module, _targets(block, subs.mlp.modules, width))


def hidden_width(model: nn.Module, stack: LayerStack, probe_ids: torch.Tensor) -> int:
    """The width d of the residual stream: the last dimension of x^0 on a probe pass."""
    import torch

    with torch.no_grad(), capture_block_states(stack, image_only_blocks(stack)) as states:
        model(input_ids=probe_ids[:1, :2])
    return int(states[0].shape[-1])


def _targets(block: nn.Module, modules: Sequence[str], width: int) -> tuple[FoldTarget, ...]:
    """The projection(s) whose output is the contribution: the linear among `modules`, else every expert's."""
    from torch import nn
    from transformers.pytorch_utils import Conv1D

    for path in modules:
        module = block.get_submodule(path)
        prefix = f"{path}." if path else ""
        if isinstance(module, nn.Linear) and module.out_features == width:
            found = [FoldTarget(f"{prefix}weight", OUT_IN)]
            return tuple(found + ([FoldTarget(f"{prefix}bias", BIAS)] if module.bias is not None else []))
        if isinstance(module, Conv1D) and module.nf == width:
            found = [FoldTarget(f"{prefix}weight", IN_OUT)]
            return tuple(found + ([FoldTarget(f"{prefix}bias", BIAS)] if module.bias is not None else []))
    # A mixture of experts: no single projection outputs the sum; fold into each expert's last one.
    outer = block.get_submodule(modules[0])
    prefix = f"{modules[0]}." if modules[0] else ""
    found = []
    for name, module in outer.named_modules():
        dotted = f"{prefix}{name}." if name else prefix
        if isinstance(module, nn.Linear) and module.out_features == width:
            found.append(FoldTarget(f"{dotted}weight", OUT_IN))
            if module.bias is not None:
                found.append(FoldTarget(f"{dotted}bias", BIAS))
        for pname, parameter in module.named_parameters(recurse=False):
            if parameter.dim() != 3:
                continue
            if parameter.shape[1] == width and parameter.shape[2] != width:
                found.append(FoldTarget(f"{dotted}{pname}", EXPERTS_OUT_IN))
            elif parameter.shape[2] == width and "down" in pname:
                found.append(FoldTarget(f"{dotted}{pname}", EXPERTS_IN_OUT))
    named = [t for t in found if _OUTPUT_NAMES.search(t.name)]
    if named:  # an expert's gate and up projections can have the shapes of its down projection
        found = named
    else:  # no family name: a square linear is more likely a gate than an output projection
        found = [t for t in found if t.layout != OUT_IN or block.get_parameter(t.name).shape[1] != width]
    if not found:
        raise UnsupportedModel(
            f"{type(block).__name__}: found no projection that writes {modules[0]!r}'s output into the residual.",
            hint="Heal this model with --method lora.",
        )
    return tuple(found)


def folded_value(parameter: torch.Tensor, layout: str, transform: np.ndarray) -> torch.Tensor:
    """`parameter` with (I + T) applied to its output dimension, computed in float64, in its own dtype."""
    import torch

    t = torch.as_tensor(transform, dtype=torch.float64, device=parameter.device)
    w = parameter.detach().double()
    if layout == OUT_IN:
        new = w + t @ w
    elif layout == IN_OUT:
        new = w + w @ t.T
    elif layout == BIAS:
        new = w + t @ w
    elif layout == EXPERTS_OUT_IN:
        new = w + torch.einsum("ij,ejk->eik", t, w)
    elif layout == EXPERTS_IN_OUT:
        new = w + torch.einsum("ekj,ij->eki", w, t)
    else:
        raise ValueError(layout)
    return new.to(parameter.dtype)


def folded_values(
    stack: LayerStack, sites: Sequence[FoldSite], maps: Sequence[np.ndarray]
) -> dict[torch.nn.Parameter, torch.Tensor]:
    """Every folded parameter (the object) → its folded value, for every site."""
    values = {}
    for site, transform in zip(sites, maps, strict=True):
        block = stack.blocks[site.block]
        for target in site.targets:
            parameter = block.get_parameter(target.name)
            values[parameter] = folded_value(parameter, target.layout, transform)
    return values


def folded_parameters(
    model: nn.Module, stack: LayerStack, sites: Sequence[FoldSite], maps: Sequence[np.ndarray]
) -> dict[str, torch.Tensor]:
    """Full parameter name (as `model.named_parameters()` says it) → its folded value, for every site."""
    names = {id(p): n for n, p in model.named_parameters(remove_duplicate=False)}
    values: dict[str, torch.Tensor] = {}
    for site, transform in zip(sites, maps, strict=True):
        block = stack.blocks[site.block]
        for target in site.targets:
            parameter = block.get_parameter(target.name)
            values[names[id(parameter)]] = folded_value(parameter, target.layout, transform)
    return values


@contextlib.contextmanager
def folded(stack: LayerStack, sites: Sequence[FoldSite], maps: Sequence[np.ndarray]) -> Iterator[None]:
    """The folds applied to the model's weights in place, the originals put back on exit."""
    import torch

    saved: list[tuple[torch.nn.Parameter, torch.Tensor]] = []
    try:
        with torch.no_grad():
            for site, transform in zip(sites, maps, strict=True):
                block = stack.blocks[site.block]
                for target in site.targets:
                    parameter = block.get_parameter(target.name)
                    saved.append((parameter, parameter.detach().clone()))
                    parameter.copy_(folded_value(parameter, target.layout, transform))
        yield
    finally:
        with torch.no_grad():
            for parameter, original in reversed(saved):
                parameter.copy_(original)
