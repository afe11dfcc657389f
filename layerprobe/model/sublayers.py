"""Find a block's attention and MLP sublayers from its data flow: the modules whose outputs join the residual.

A transformer block adds two things to its residual stream: an attention output and an MLP output
(sequentially, or both to the same input in a parallel block). Names differ in every family
(`self_attn`, `attention.output.dense`, `attn`, `post_feedforward_layernorm`…), so the block is replayed
once (`trace.trace_block`) and the two contributions are found by value: a module output `f` with
`s = r + f` for two tensors `r` (the residual) and `s` (the sum) seen in the same pass. Which of the
two is attention is decided by autograd: attention's output at the last position depends on the
residual at earlier positions; an MLP's does not.

The result names the module to hook or ablate for each sublayer, the residual it is added to, and the
block parameters that belong to it. Anything that does not fit this picture raises `UnsupportedModel`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from layerprobe.core import UnsupportedModel
from layerprobe.model.stack import BlockArgs, BlockKwargs, LayerStack
from layerprobe.model.streams import untraceable_image_block
from layerprobe.model.trace import BlockTrace, Recorded, StreamRef, capture_block_calls, trace_block

if TYPE_CHECKING:
    import torch
    from torch import nn

ATTENTION, MLP = "attention", "mlp"


@dataclass(frozen=True)
class Sublayer:
    """One residual contribution of a block.

    Attributes:
        kind: "attention" or "mlp".
        module: path (relative to the block) of the module whose output is added to the residual;
            among modules producing that same tensor, the one holding the most parameters, then the
            outermost (e.g. `self_attn` rather than `self_attn.o_proj`).
        modules: every module that outputs that tensor (dropouts, projections, wrappers).
        residual: the tensor the contribution is added to.
        total: the tensor holding residual + contribution (+ the other one, in a parallel block).
        parameters: names (relative to the block) of the parameters the contribution depends on and
            the residual does not: the sublayer's own weights, its input norm included.
    """

    kind: str
    module: str
    modules: tuple[str, ...]
    residual: StreamRef
    total: StreamRef
    parameters: tuple[str, ...]


@dataclass(frozen=True)
class BlockSublayers:
    """The attention and MLP sublayers of one block, and whether they read the same residual (parallel)."""

    attention: Sublayer
    mlp: Sublayer
    parallel: bool

    def __iter__(self) -> Iterator[Sublayer]:
        return iter((self.attention, self.mlp))


@dataclass
class Contribution:
    """A matched `total = residual + output` in a trace (internal; `Sublayer` is the public view)."""

    output: Recorded
    modules: list[str]
    residual: Recorded
    total: Recorded


def find_sublayers(block: nn.Module, args: BlockArgs, kwargs: BlockKwargs) -> BlockSublayers:
    """Locate the attention and MLP sublayers of `block`, called as `block(*args, **kwargs)`.

    Args:
        block: a transformer block (left unchanged).
        args: positional arguments of one real call of the block (e.g. from `trace.capture_block_calls`);
            hidden states (batch, seq, hidden) with seq >= 2.
        kwargs: keyword arguments of that call.

    Raises:
        UnsupportedModel: the block does not add exactly one position-mixing and one position-wise
            contribution to a residual stream.
    """
    return sublayers_from_trace(trace_block(block, args, kwargs))


def find_model_sublayers(model: nn.Module, stack: LayerStack, input_ids: torch.Tensor) -> list[BlockSublayers]:
    """`find_sublayers` for every block of `stack`, from one forward pass of `model` on `input_ids`."""
    calls = capture_block_calls(model, stack, input_ids)
    skipped = [i for i in range(stack.num_layers) if i not in calls]
    if skipped:  # mllama's image-only blocks: a text-only pass never calls them
        raise untraceable_image_block(stack.path, skipped[0])
    return [find_sublayers(block, *calls[i]) for i, block in enumerate(stack.blocks)]


def sublayers_from_trace(trace: BlockTrace) -> BlockSublayers:
    """The two sublayers of a traced block (see `find_sublayers`)."""
    contributions, parallel = match_contributions(trace)
    name = type(trace.block).__name__
    if len(contributions) != 2:
        found = ", ".join(f"{c.modules[0]} (added to {c.residual.ref})" for c in contributions) or "none"
        raise UnsupportedModel(
            f"{name}: expected 2 residual contributions (attention and MLP), found {len(contributions)}: {found}.",
            hint="layerprobe understands blocks of the form x + attn(·) + mlp(·), sequential or parallel.",
        )
    mixing = [_mixes_positions(trace, c) for c in contributions]
    if mixing.count(True) != 1:
        raise UnsupportedModel(
            f"{name}: cannot tell attention from MLP ({sum(mixing)} of 2 contributions mix positions).",
            hint="Attention is the contribution whose output at one position depends on other positions.",
        )
    attention = contributions[mixing.index(True)]
    mlp = contributions[mixing.index(False)]
    return BlockSublayers(_public(trace, ATTENTION, attention), _public(trace, MLP, mlp), parallel)


def match_contributions(trace: BlockTrace) -> tuple[list[Contribution], bool]:
    """Module outputs `f` with `s = r + f` for streams r before f and s after it.

    Returns the contributions in order of appearance and whether they were found as one three-term
    sum `s = r + f1 + f2` (a parallel block) rather than two two-term sums.
    """
    streams = trace.streams()
    outputs = _output_groups(trace)
    found: list[Contribution] = []
    for total in streams:
        for residual in streams:
            if residual.order >= total.order:
                continue
            for group in outputs:
                output = group[0]
                if any(output is c.output for c in found):
                    continue
                if not residual.order < output.order <= total.order or output is total:
                    continue
                if _is_sum(trace, total.tensor, residual.tensor, output.tensor):
                    found.append(Contribution(output, _rank(trace, group), residual, total))
    found = [c for c in found if not any(_inside(c, other) for other in found if other is not c)]
    if len(found) >= 2:
        return sorted(found, key=lambda c: c.output.order), False
    for total in streams:
        for residual in streams:
            if residual.order >= total.order:
                continue
            for i, first in enumerate(outputs):
                for second in outputs[i + 1 :]:
                    a, b = first[0], second[0]
                    if not (residual.order < a.order <= total.order and residual.order < b.order <= total.order):
                        continue
                    if _is_sum(trace, total.tensor, residual.tensor, a.tensor + b.tensor):
                        pair = [
                            Contribution(a, _rank(trace, first), residual, total),
                            Contribution(b, _rank(trace, second), residual, total),
                        ]
                        return pair, True
    return sorted(found, key=lambda c: c.output.order), False


def _inside(inner: Contribution, outer: Contribution) -> bool:
    """Whether `inner` is a sum inside `outer`'s module: part of that sublayer, not the block's residual.

    Example: an MoE layer adding its shared experts to its routed experts.
    """
    return all(any(m.startswith(o + ".") for o in outer.modules) for m in inner.modules)


def _output_groups(trace: BlockTrace) -> list[list[Recorded]]:
    """Module outputs grouped by equal value (a projection, its dropout and its wrapper give one tensor)."""
    groups: list[list[Recorded]] = []
    outputs = [call.output for call in trace.calls.values() if call.output is not None]
    for output in sorted(outputs, key=lambda recorded: recorded.order):
        if float(output.tensor.detach().abs().max()) == 0.0:
            continue
        for group in groups:
            if trace.same(group[0].tensor, output.tensor):
                group.append(output)
                break
        else:
            groups.append([output])
    return groups


def _rank(trace: BlockTrace, group: list[Recorded]) -> list[str]:
    """Modules of one output group, best handle first: most parameters, then outermost, then first."""
    paths = [r.ref.module for r in group if r.ref.module is not None]  # module outputs all name their module
    return sorted(paths, key=lambda p: (-trace.calls[p].num_parameters, p.count("."), paths.index(p)))


def _is_sum(trace: BlockTrace, total: torch.Tensor, residual: torch.Tensor, output: torch.Tensor) -> bool:
    """Whether total == residual + output, elementwise up to rounding, with a contribution that is not ~zero."""
    if total.shape[1] > 1 and not _sum_within_rounding(trace, total[:, -1:], residual[:, -1:], output[:, -1:]):
        return False  # cheap rejection on one position: most candidate triples fail here
    scale = float(residual.detach().abs().max() + output.detach().abs().max())
    if scale == 0.0 or float(output.detach().abs().max()) <= trace.tolerance * scale:
        return False
    return _sum_within_rounding(trace, total, residual, output)


def _sum_within_rounding(trace: BlockTrace, total: torch.Tensor, residual: torch.Tensor, output: torch.Tensor) -> bool:
    """Whether total == residual + output elementwise, within a few roundings of the replay dtype."""
    total, residual, output = total.detach(), residual.detach(), output.detach()
    scale = float(residual.abs().max() + output.abs().max())
    return float((total - residual - output).abs().max()) <= trace.tolerance * max(scale, 1e-30) * 4


def _mixes_positions(trace: BlockTrace, contribution: Contribution) -> bool:
    """Whether the contribution at the last position depends on the residual at earlier positions."""
    import torch

    residual = contribution.residual
    with torch.enable_grad():
        last = contribution.output.tensor[:, -1]
        if not last.requires_grad:
            return False
        (grad,) = torch.autograd.grad(last.sum(), [residual.source], retain_graph=True, allow_unused=True)
    return grad is not None and float(grad.reshape(residual.tensor.shape)[:, :-1].abs().sum()) > 0.0


def _public(trace: BlockTrace, kind: str, contribution: Contribution) -> Sublayer:
    names = [name for name, _ in trace.block.named_parameters()]
    params = [p for _, p in trace.block.named_parameters()]
    own = trace.depends(contribution.output.tensor, params)
    inherited = trace.depends(contribution.residual.tensor, params)
    parameters = tuple(n for n, o, i in zip(names, own, inherited, strict=True) if o and not i)
    return Sublayer(
        kind=kind,
        module=contribution.modules[0],
        modules=tuple(contribution.modules),
        residual=contribution.residual.ref,
        total=contribution.total.ref,
        parameters=parameters,
    )
