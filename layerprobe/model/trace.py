"""Replay one block with hooks on every submodule and record its data flow.

Sublayer discovery (`sublayers.py`) and norm placement (`placement.py`) decide from what a block *does*,
never from what its modules are called: which tensors are added to the residual stream, which module
normalises what. Both read the `BlockTrace` built here. The block is replayed on a private float64
(CPU) or float32 (accelerator) copy, so equalities such as `s = r + f(·)` can be tested to rounding
error whatever dtype the model runs in, and autograd on the copy tells which tensor depends on which.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from layerprobe.core import UnsupportedModel
from layerprobe.model.stack import (
    BlockArgs,
    BlockCall,
    BlockKwargs,
    ForwardHook,
    LayerStack,
    PreHook,
    hidden_from_input,
    hidden_from_output,
)
from layerprobe.model.streams import image_only_blocks
from layerprobe.model.towers import run_tower, tower_of

if TYPE_CHECKING:
    import torch
    from torch import nn


@dataclass(frozen=True)
class StreamRef:
    """Where a hidden-shaped tensor shows up in a block: the block input, a module's input or its output.

    `key` names the argument of a module input: an int for a positional argument, a str for a keyword.
    Hooks on the real model use this to pick the same tensor during a measurement pass.
    """

    kind: str  # "block input" | "input" | "output" | "block output"
    module: str | None = None
    key: int | str | None = None

    def __str__(self) -> str:
        if self.kind in ("block input", "block output"):
            return self.kind
        return f"{self.kind} of {self.module}"


@dataclass
class Recorded:
    """One hidden-shaped tensor seen during the replay, with when it appeared (call order)."""

    ref: StreamRef
    tensor: torch.Tensor  # viewed as (batch, seq, hidden)
    order: int
    source: torch.Tensor  # the tensor itself, as it sits in the autograd graph (what to differentiate by)


@dataclass
class ModuleCall:
    """The first call of one submodule during the replay."""

    path: str
    inputs: list[Recorded]
    output: Recorded | None
    single_input: torch.Tensor | None  # the only floating tensor it received, if exactly one (norm candidates)
    num_parameters: int


@dataclass
class BlockTrace:
    """Everything recorded while replaying one block once: input x (a leaf), output y, every module call."""

    block: nn.Module  # the private copy that was replayed (its parameters require grad)
    x: torch.Tensor
    y: torch.Tensor
    calls: dict[str, ModuleCall]
    recorded: list[Recorded] = field(default_factory=list)

    @property
    def hidden_size(self) -> int:
        return int(self.x.shape[-1])

    @property
    def tolerance(self) -> float:
        """Relative tolerance for value equality: rounding of the replay dtype, with room for a few ops."""
        import torch

        return 1e-9 if self.x.dtype == torch.float64 else 3e-5

    def same(self, a: torch.Tensor, b: torch.Tensor) -> bool:
        """Whether two tensors hold the same values up to rounding."""
        if a is b:
            return True
        if a.shape != b.shape:
            return False
        a, b = a.detach(), b.detach()
        scale = float(a.abs().max().clamp_min(b.abs().max()))
        return float((a - b).abs().max()) <= self.tolerance * max(scale, 1e-30)

    def depends(self, output: torch.Tensor, inputs: Sequence[torch.Tensor]) -> list[bool]:
        """For each tensor in `inputs`, whether `output` is reachable from it in the autograd graph."""
        import torch

        if not output.requires_grad:
            return [False] * len(inputs)
        with torch.enable_grad():  # callers may sit inside no_grad (a hook during a measurement pass)
            grads = torch.autograd.grad(output.sum(), inputs, retain_graph=True, allow_unused=True)
        return [g is not None for g in grads]

    def streams(self) -> list[Recorded]:
        """Hidden-shaped tensors with distinct values, in order of appearance (first appearance kept)."""
        unique: list[Recorded] = []
        for item in sorted(self.recorded, key=lambda r: r.order):
            if not any(self.same(item.tensor, seen.tensor) for seen in unique):
                unique.append(item)
        return unique


def replay_dtype(device: torch.device) -> torch.dtype:
    """float64 on CPU (exact equalities, cheap for one block); float32 on accelerators (MPS has no float64)."""
    import torch

    return torch.float64 if device.type == "cpu" else torch.float32


def _hidden_shaped(value: torch.Tensor, shape: tuple[int, ...]) -> bool:
    """(batch, seq, hidden), or the same positions flattened (OPT runs its MLP on (batch·seq, hidden))."""
    return value.shape[-1] == shape[-1] and value.numel() == shape[0] * shape[1] * shape[2]


def _cast(value: object, dtype: torch.dtype, device: torch.device) -> object:
    """A copy of one call argument on `device`, floating tensors in `dtype` (containers walked, the rest kept)."""
    import torch

    if isinstance(value, torch.Tensor):
        value = value.detach()
        return value.to(device=device, dtype=dtype) if value.is_floating_point() else value.to(device)
    if isinstance(value, tuple):
        return tuple(_cast(v, dtype, device) for v in value)
    if isinstance(value, list):
        return [_cast(v, dtype, device) for v in value]
    if isinstance(value, dict):
        return {k: _cast(v, dtype, device) for k, v in value.items()}
    return value


def trace_block(block: nn.Module, args: BlockArgs, kwargs: BlockKwargs) -> BlockTrace:
    """Replay `block(*args, **kwargs)` on a private copy and record every hidden-shaped tensor.

    Args:
        block: one transformer block (not modified: a copy is replayed).
        args: positional arguments of one recorded call (see `capture_block_calls`); the hidden
            states are (batch, seq, hidden) with seq >= 2.
        kwargs: keyword arguments of that call.

    Returns:
        The trace, with autograd enabled on the copy (x is a leaf that requires grad).
    """
    import torch

    params = list(block.parameters())
    device = params[0].device if params else torch.device("cpu")
    if device.type == "meta":
        raise UnsupportedModel("Cannot trace a block whose weights are not loaded (meta device).")
    dtypes = [replay_dtype(device)]
    if dtypes[0] != torch.float32:
        dtypes.append(torch.float32)  # some kernels (grouped MoE matmuls) have no float64 version
    for dtype in dtypes:
        try:
            return _replay(block, args, kwargs, dtype, device)
        except (RuntimeError, NotImplementedError) as exc:
            failure = exc
    raise UnsupportedModel(f"Cannot replay {type(block).__name__} to trace it: {failure}")


def _replay(
    block: nn.Module, args: BlockArgs, kwargs: BlockKwargs, dtype: torch.dtype, device: torch.device
) -> BlockTrace:
    """One replay of `block` in `dtype` on `device`, recording every hidden-shaped tensor (see `trace_block`)."""
    import torch

    replica = copy.deepcopy(block).to(dtype)
    for module in replica.modules():  # hooks copied from the original (a caller's, or ours) must not fire
        for hooks in (module._forward_pre_hooks, module._forward_hooks):
            hooks.clear()
    for param in replica.parameters():
        param.requires_grad_(True)
    args = tuple(_cast(value, dtype, device) for value in args)
    kwargs = {key: _cast(value, dtype, device) for key, value in kwargs.items()}
    hidden = hidden_from_input(args, kwargs)
    x = hidden.detach().clone().requires_grad_(True)
    if args:
        args = (x, *args[1:])
    else:
        kwargs = dict(kwargs, hidden_states=x)
    shape = tuple(x.shape)
    if len(shape) != 3 or shape[1] < 2:
        raise UnsupportedModel(
            f"Cannot trace a block whose hidden states are shaped {shape}; expected (batch, seq>=2, hidden)."
        )
    calls: dict[str, ModuleCall] = {}
    recorded: list[Recorded] = [Recorded(StreamRef("block input"), x, 0, x)]
    clock = [0]

    def tick() -> int:
        clock[0] += 1
        return clock[0]

    def before(path: str) -> PreHook:
        def hook(module: nn.Module, m_args: BlockArgs, m_kwargs: BlockKwargs) -> None:
            if path in calls:
                return
            inputs: list[Recorded] = []
            floats: list[torch.Tensor] = []
            arguments: list[tuple[int | str, object]] = [*enumerate(m_args), *m_kwargs.items()]
            for key, value in arguments:
                if isinstance(value, torch.Tensor) and value.is_floating_point():
                    floats.append(value)
                    if _hidden_shaped(value, shape):
                        inputs.append(Recorded(StreamRef("input", path, key), value.reshape(shape), tick(), value))
            single = floats[0].reshape(shape) if len(floats) == 1 and _hidden_shaped(floats[0], shape) else None
            size = sum(p.numel() for p in module.parameters())
            calls[path] = ModuleCall(path, inputs, None, single, size)
            recorded.extend(inputs)

        return hook

    def after(path: str) -> ForwardHook:
        def hook(module: nn.Module, _args: BlockArgs, output: object) -> None:
            call = calls.get(path)
            if call is None or call.output is not None:
                return
            try:
                value = hidden_from_output(output)
            except (UnsupportedModel, IndexError):
                return
            if isinstance(value, torch.Tensor) and value.is_floating_point() and _hidden_shaped(value, shape):
                call.output = Recorded(StreamRef("output", path), value.reshape(shape), tick(), value)
                recorded.append(call.output)

        return hook

    handles = []
    for path, module in replica.named_modules():
        if path:
            handles.append(module.register_forward_pre_hook(before(path), with_kwargs=True))
            handles.append(module.register_forward_hook(after(path)))
    try:
        with torch.enable_grad():
            y = hidden_from_output(replica(*args, **kwargs))
    finally:
        for handle in handles:
            handle.remove()
    if tuple(y.shape) != shape:
        raise UnsupportedModel(f"{type(block).__name__} returned {tuple(y.shape)} for input {shape}.")
    recorded.append(Recorded(StreamRef("block output"), y, tick(), y))
    return BlockTrace(replica, x, y, calls, recorded)


@contextlib.contextmanager
def captured_block_calls(stack: LayerStack) -> Iterator[dict[int, BlockCall]]:
    """Record the (args, kwargs) each block is called with during forward passes run inside.

    Yields a dict block index → (args, kwargs) of its last call; tensors are referenced, not copied.
    A block the pass skips on purpose (`streams.image_only_blocks`) has no entry.
    """
    calls: dict[int, BlockCall] = {}

    def recorder(index: int) -> PreHook:
        def hook(_module: nn.Module, args: BlockArgs, kwargs: BlockKwargs) -> None:
            calls[index] = (args, dict(kwargs))

        return hook

    handles = [block.register_forward_pre_hook(recorder(i), with_kwargs=True) for i, block in enumerate(stack.blocks)]
    try:
        yield calls
    finally:
        for handle in handles:
            handle.remove()


def capture_block_calls(
    model: nn.Module, stack: LayerStack, input_ids: torch.Tensor | dict[str, torch.Tensor]
) -> dict[int, BlockCall]:
    """Run `model` once on `input_ids` (batch, seq) and return every block's call arguments.

    A vision stack is given its tower's inputs instead (`{"pixel_values": ...}`), run by the tower's
    runner (`towers.run_tower`), as a dual encoder's text tower is.
    """
    import torch

    inputs = input_ids if isinstance(input_ids, dict) else {"input_ids": input_ids}
    with torch.no_grad(), captured_block_calls(stack) as calls:
        run_tower(model, tower_of(stack), inputs)
    skipped = image_only_blocks(stack)  # mllama's image-only blocks: a text-only pass skips them on purpose
    if len(calls) != stack.num_layers and any(i not in calls for i in range(stack.num_layers) if i not in skipped):
        raise UnsupportedModel(f"Only {len(calls)} of {stack.num_layers} blocks ran in a forward pass.")
    return calls
