"""Find the stack of transformer blocks in any model, capture block inputs, remove blocks in memory.

This is the one place that knows how blocks are wired into a model, so every metric shares the same
index convention: block l has input x^l, the last block's output is x^L (before any final norm), and
"removing block l" means x^l goes straight to block l+1.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from layerprobe.errors import UnsupportedModel

# Stack locations of common families, relative to the base model (the model without its head).
KNOWN_PATHS = (
    "layers",  # LLaMA, Qwen, Mistral, DeepSeek, Gemma, Phi, GPT-NeoX
    "h",  # GPT-2, GPT-J, Falcon, BLOOM
    "encoder.layer",  # BERT, RoBERTa, ELECTRA, DeBERTa
    "decoder.layers",  # OPT
    "blocks",  # MPT
    "language_model.layers",  # multimodal wrappers
    "model.layers",
    "transformer.h",  # models whose base_model is the whole model (remote code)
)


@dataclass(frozen=True)
class LayerStack:
    """The ModuleList of blocks inside `root`, found at `path` (dotted, relative to `root`)."""

    root: Any
    path: str
    blocks: Any

    @property
    def num_layers(self) -> int:
        return len(self.blocks)

    @property
    def block_class(self) -> str:
        return type(self.blocks[0]).__name__

    def parameters_per_block(self) -> list[int]:
        return [sum(p.numel() for p in block.parameters()) for block in self.blocks]


def find_layers(model: Any, path: str | None = None) -> LayerStack:
    """Locate the block stack: `path` if given, else known paths, else the largest repeated ModuleList.

    The stack is looked up in the base model (`model.base_model`: the model without its head), and its
    path is given relative to it, so `angular` (base model) and `prune-drop` (model with a head) report
    the same path and accept the same `--layers-path`; a path written from the head model
    (`model.layers`) is accepted too. The fallback picks, among ModuleLists whose children share one
    class, the one holding the most parameters: the block stack contains everything else that repeats
    (MoE expert lists included).
    """
    base = getattr(model, "base_model", model)
    if path:
        return _stack_at(base, _relative_to_base(model, base, path))
    for candidate in KNOWN_PATHS:
        found = _module_list(base, candidate)
        if found is not None:
            return LayerStack(base, candidate, found)
    best = _largest_repeated_list(base)
    if best is None:
        raise UnsupportedModel(
            f"Cannot find the transformer blocks of {type(model).__name__}: none of the known paths "
            f"({', '.join(dict.fromkeys(KNOWN_PATHS))}) exist and no ModuleList of repeated blocks was found.",
            hint="Pass --layers-path with the dotted path of the blocks' nn.ModuleList.",
        )
    return LayerStack(base, best[0], best[1])


def _relative_to_base(model: Any, base: Any, path: str) -> str:
    prefix = getattr(model, "base_model_prefix", "")
    if base is not model and prefix and path.startswith(prefix + ".") and _module_list(base, path) is None:
        return path[len(prefix) + 1 :]
    return path


def _stack_at(base: Any, path: str) -> LayerStack:
    try:
        found = base.get_submodule(path)
    except AttributeError as exc:
        raise UnsupportedModel(
            f"--layers-path {path!r} does not exist in {type(base).__name__}.",
            hint="Run `layerprobe layers MODEL` to see the stack layerprobe finds.",
        ) from exc
    from torch import nn

    if not isinstance(found, nn.ModuleList) or len(found) == 0:
        raise UnsupportedModel(
            f"--layers-path {path!r} is a {type(found).__name__}, not a list of blocks.",
            hint="Point it at the nn.ModuleList that holds the transformer blocks.",
        )
    return LayerStack(base, path, found)


def _module_list(root: Any, path: str) -> Any:
    from torch import nn

    try:
        found = root.get_submodule(path)
    except AttributeError:
        return None
    return found if isinstance(found, nn.ModuleList) and len(found) > 0 else None


def _largest_repeated_list(root: Any) -> tuple[str, Any] | None:
    from torch import nn

    best: tuple[int, str, Any] | None = None
    for name, module in root.named_modules():
        if not isinstance(module, nn.ModuleList) or len(module) < 2:
            continue
        if len({type(child) for child in module}) != 1:
            continue
        size = sum(p.numel() for p in module.parameters())
        if size and (best is None or size > best[0]):
            best = (size, name, module)
    return None if best is None else (best[1], best[2])


def hidden_from_output(output: Any) -> Any:
    """The hidden states a block returns: blocks return a tensor, a tuple led by it, or a ModelOutput."""
    import torch

    if isinstance(output, torch.Tensor):
        return output
    if isinstance(output, (tuple, list)):
        return output[0]
    if hasattr(output, "to_tuple"):
        return output.to_tuple()[0]
    raise UnsupportedModel(f"A block returned {type(output).__name__}; cannot find its hidden states.")


def hidden_from_input(args: tuple, kwargs: dict) -> Any:
    """The hidden states a block receives, passed positionally or as `hidden_states=`."""
    if args:
        return args[0]
    if "hidden_states" in kwargs:
        return kwargs["hidden_states"]
    raise UnsupportedModel("A block was called without hidden states as its first argument.")


@contextlib.contextmanager
def capture_block_states(stack: LayerStack) -> Iterator[list]:
    """Record x^0 … x^L during the forward passes run inside the block.

    Yields a list that holds, after each forward pass, L+1 tensors of shape (batch, seq, hidden): the
    input of every block and the output of the last. The caller clears it between passes. Tensors are
    referenced, not copied: blocks build new tensors, so the recorded ones stay valid.
    """
    states: list = []
    last = stack.num_layers - 1

    def before(_module, args, kwargs):
        states.append(hidden_from_input(args, kwargs))

    def after(_module, _args, output):
        states.append(hidden_from_output(output))

    handles = [block.register_forward_pre_hook(before, with_kwargs=True) for block in stack.blocks]
    handles.append(stack.blocks[last].register_forward_hook(after))
    try:
        yield states
    finally:
        for handle in handles:
            handle.remove()


def _configs_of(stack: LayerStack) -> list[Any]:
    """Every distinct config in the model that describes this stack (text_config of wrappers too)."""
    seen: dict[int, Any] = {}
    for module in stack.root.modules():
        config = getattr(module, "config", None)
        if config is None or id(config) in seen:
            continue
        for candidate in (config, getattr(config, "text_config", None)):
            if candidate is not None and getattr(candidate, "num_hidden_layers", None) == stack.num_layers:
                seen[id(candidate)] = candidate
    return list(seen.values())


@contextlib.contextmanager
def removed_blocks(stack: LayerStack, indices: list[int] | tuple[int, ...]) -> Iterator[LayerStack]:
    """Take blocks out of the model in memory, exactly as if the checkpoint had been saved without them.

    The ModuleList loses the blocks; every remaining block's `layer_idx` attributes (KV-cache slots)
    are renumbered; each config's `num_hidden_layers` and its per-layer lists (e.g. `layer_types`)
    shrink. No weight is copied or changed, and everything is restored on exit, also on exceptions.
    Yields the shrunken stack.
    """
    from torch import nn

    remove = set(indices)
    if not remove:
        yield stack
        return
    if not remove <= set(range(stack.num_layers)):
        raise UnsupportedModel(f"Cannot remove blocks {sorted(remove)}: the model has {stack.num_layers}.")
    original = list(stack.blocks)
    kept = [block for i, block in enumerate(original) if i not in remove]
    parent_path, _, attr = stack.path.rpartition(".")
    parent = stack.root.get_submodule(parent_path) if parent_path else stack.root
    restore: list[tuple[Any, str, Any]] = []
    try:
        for new_index, block in enumerate(kept):
            for module in block.modules():
                if isinstance(getattr(module, "layer_idx", None), int):
                    restore.append((module, "layer_idx", module.layer_idx))
                    module.layer_idx = new_index
        for config in _configs_of(stack):
            for key, value in list(vars(config).items()):
                if "layer" in key and isinstance(value, (list, tuple)) and len(value) == len(original):
                    restore.append((config, key, value))
                    setattr(config, key, type(value)(v for i, v in enumerate(value) if i not in remove))
            restore.append((config, "num_hidden_layers", config.num_hidden_layers))
            config.num_hidden_layers = len(kept)
        shrunk = nn.ModuleList(kept)
        restore.append((parent, attr, stack.blocks))
        setattr(parent, attr, shrunk)
        yield LayerStack(stack.root, stack.path, shrunk)
    finally:
        for owner, key, value in reversed(restore):
            setattr(owner, key, value)
