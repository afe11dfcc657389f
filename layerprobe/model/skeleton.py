"""Norm placement of a model built without weights (`layerprobe layers`), one random block at a time.

Placement is a property of the code and the config, not of trained values, so `layers` traces the
weightless skeleton: parameters outside the blocks get random values once, and each block gets random
values just before it runs and goes back to the meta device right after it has been traced. Memory
stays at one block (plus its float64 replay), whatever the model's size.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING

from layerprobe.core import UnsupportedModel
from layerprobe.model.encdec import decoder_start, is_encoder_decoder, shift_right
from layerprobe.model.placement import place_block, summarise
from layerprobe.model.stack import BlockArgs, BlockKwargs, ForwardHook, LayerStack, PreHook
from layerprobe.model.towers import run_tower, tower_of, trace_inputs
from layerprobe.results import BlockPlacement, Placement

if TYPE_CHECKING:
    from torch import nn

TRACE_SHAPE = (2, 16)  # (windows, tokens) of random ids


def placement_without_weights(model: nn.Module, stack: LayerStack, vocab_size: int) -> Placement:
    """Trace every block of a meta-device skeleton with random weights (see the module docstring).

    Args:
        model: the skeleton base model (`load.load_skeleton`), parameters on the meta device.
        stack: its blocks.
        vocab_size: token ids are drawn from [0, vocab_size) (a vision stack gets random images instead:
            `towers.trace_inputs`).
    """
    import torch

    model.float()
    in_blocks = {id(p) for p in stack.blocks.parameters()}
    _materialise(model, model, skip=in_blocks)
    placed: dict[int, BlockPlacement] = {}
    handles = []

    def before(index: int) -> PreHook:
        def hook(block: nn.Module, args: BlockArgs, kwargs: BlockKwargs) -> None:
            _materialise(model, block)
            placed[index] = place_block(index, block, args, dict(kwargs))[0]

        return hook

    def after(_index: int) -> ForwardHook:
        def hook(block: nn.Module, _args: BlockArgs, _output: object) -> None:
            block.to("meta")

        return hook

    for index, block in enumerate(stack.blocks):
        handles.append(block.register_forward_pre_hook(before(index), with_kwargs=True))
        handles.append(block.register_forward_hook(after(index)))
    inputs = trace_inputs(model, stack, vocab_size, TRACE_SHAPE)
    if is_encoder_decoder(model):  # the teacher-forced pass every command runs (encdec.py)
        inputs["decoder_input_ids"] = shift_right(inputs["input_ids"], decoder_start(getattr(model, "config")))  # noqa: B009
    try:
        with torch.no_grad():
            run_tower(model, tower_of(stack), inputs)
    finally:
        for handle in handles:
            handle.remove()
        model.to("meta")
    skipped = [i for i in range(stack.num_layers) if i not in placed]
    if skipped:
        raise UnsupportedModel(
            f"block(s) {', '.join(map(str, skipped))} did not run on {' and '.join(inputs)} alone "
            "(they run only with another input, such as an image)"
        )
    return summarise([placed[i] for i in range(stack.num_layers)])


def _materialise(model: nn.Module, root: nn.Module, skip: Collection[int] = frozenset()) -> None:
    """Give every meta parameter under `root` random values, then the model's own init where it has one."""
    import torch
    from torch import nn

    init_weights = getattr(model, "_init_weights", None)  # transformers' per-module initialisation
    for module in root.modules():
        changed = False
        for name, param in list(module._parameters.items()):
            if param is None or not param.is_meta or id(param) in skip:
                continue
            value = torch.empty(param.shape, dtype=torch.float32).normal_(0.0, 0.02)
            module._parameters[name] = nn.Parameter(value, requires_grad=False)
            changed = True
        if changed and init_weights is not None:
            try:
                init_weights(module)  # norms to ones, embeddings and projections at the config's std
            except Exception:  # noqa: BLE001 - a family's init may need context we lack; random values stand
                pass
