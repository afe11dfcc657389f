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

from layerprobe.core import UnsupportedModel

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
    base = base_of(model)
    _refuse_shared_weights(base)
    if path:
        return _checked(_stack_at(base, _relative_to_base(model, base, path)))
    for candidate in KNOWN_PATHS:
        found = _module_list(base, candidate)
        if found is not None:
            return _checked(LayerStack(base, candidate, found))
    best = _largest_repeated_list(base)
    if best is None:
        raise UnsupportedModel(
            f"Cannot find the transformer blocks of {type(model).__name__}: none of the known paths "
            f"({', '.join(dict.fromkeys(KNOWN_PATHS))}) exist and no ModuleList of repeated blocks was found.",
            hint="Pass --layers-path with the dotted path of the blocks' nn.ModuleList.",
        )
    return _checked(LayerStack(base, best[0], best[1]))


def base_of(model: Any) -> Any:
    """The model without its head: the module whose forward returns `last_hidden_state`.

    Usually `model.base_model`. Some heads name a `base_model_prefix` that is not one of their attributes
    (Llama-4 text: "language_model", while the decoder sits at `model`), so `base_model` is the whole model;
    then the child model that owns the input embeddings is the base. Both engines and both commands use
    this, so they agree on the stack and its path.
    """
    from torch import nn

    base = getattr(model, "base_model", model)
    if base is not model or not isinstance(model, nn.Module):
        return base
    embeddings = _input_embeddings(model)
    for child in model.children():
        if hasattr(child, "base_model") and embeddings is not None and _input_embeddings(child) is embeddings:
            return base_of(child)
    return model


def _input_embeddings(model: Any) -> Any:
    try:
        return model.get_input_embeddings()
    except (AttributeError, NotImplementedError):
        return None


def _relative_to_base(model: Any, base: Any, path: str) -> str:
    """Accept a path written from the head model (`model.layers`) as well as from the base (`layers`)."""
    if _module_list(base, path) is not None:
        return path
    prefixes = {getattr(model, "base_model_prefix", ""), getattr(base, "base_model_prefix", "")}
    prefixes.update(name for name, child in getattr(model, "named_children", list)() if child is base)
    for prefix in sorted(p for p in prefixes if p):
        if path.startswith(prefix + "."):
            return path[len(prefix) + 1 :]
    return path


def _refuse_shared_weights(base: Any) -> None:
    """ALBERT applies one layer module L times: there is no list of L distinct blocks to capture or remove."""
    config = getattr(base, "config", None)
    groups = getattr(config, "num_hidden_groups", None)
    if isinstance(groups, int) and groups < getattr(config, "num_hidden_layers", groups):
        raise UnsupportedModel(
            f"{type(base).__name__} shares weights across its depth: {groups} layer group(s) applied "
            f"{config.num_hidden_layers} times (ALBERT-style), so it has no stack of distinct blocks.",
            hint="layerprobe measures models whose blocks are separate modules, each applied once per forward "
            "pass; no --layers-path can change that for this model.",
        )


def _checked(stack: LayerStack) -> LayerStack:
    """Refuse a list that holds one module several times: removing or hooking "one block" would hit all."""
    if len({id(block) for block in stack.blocks}) != stack.num_layers:
        raise UnsupportedModel(
            f"The blocks at {stack.path!r} repeat one module object (shared weights), so one block cannot be "
            "captured or removed on its own.",
            hint="layerprobe measures models whose blocks are separate modules, each applied once per forward pass.",
        )
    return stack


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

    Each forward pass of the stack's root must call every block exactly once; a block applied twice
    (shared weights) or skipped would shift every recorded index, so it raises `UnsupportedModel`.
    """
    states: list = []
    last = stack.num_layers - 1
    calls = [0] * stack.num_layers

    def begin(_module, _args, _kwargs):
        calls[:] = [0] * len(calls)

    def before_block(index: int):
        def before(_module, args, kwargs):
            calls[index] += 1
            states.append(hidden_from_input(args, kwargs))

        return before

    def after(_module, _args, output):
        states.append(hidden_from_output(output))

    def end(_module, _args, _output):
        wrong = [(i, n) for i, n in enumerate(calls) if n != 1]
        if wrong:
            index, count = wrong[0]
            raise UnsupportedModel(
                f"Block {index} of {stack.path!r} ran {count} times in one forward pass of "
                f"{type(stack.root).__name__}; layerprobe needs every block applied exactly once.",
                hint="Models that reuse one block (shared weights) or skip blocks cannot be measured block by block.",
            )

    handles = [
        block.register_forward_pre_hook(before_block(index), with_kwargs=True)
        for index, block in enumerate(stack.blocks)
    ]
    handles.append(stack.blocks[last].register_forward_hook(after))
    handles.append(stack.root.register_forward_pre_hook(begin, with_kwargs=True))
    handles.append(stack.root.register_forward_hook(end))
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
    shrink. Per-layer patterns a config derives from its depth (Jamba's `layer_types` from
    `attn_layer_period`/`offset`) are snapshotted at full depth and pinned to the kept blocks, so the
    shorter model does not realign them. No weight is copied or changed, and everything is restored on
    exit, also on exceptions.
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
            patterns = _derived_patterns(config, len(original))
            if patterns:
                kept_patterns = {k: type(v)(x for i, x in enumerate(v) if i not in remove) for k, v in patterns.items()}
                restore.append((config, "__class__", type(config)))
                config.__class__ = _pinned_class(type(config), kept_patterns)
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


def _derived_patterns(config: Any, depth: int) -> dict[str, Any]:
    """Per-layer lists a config computes from its depth (properties), e.g. Jamba's `layer_types`."""
    patterns = {}
    for cls in type(config).__mro__:
        for name, attribute in vars(cls).items():
            if not isinstance(attribute, property) or name in patterns or "layer" not in name:
                continue
            try:
                value = getattr(config, name)
            except Exception:  # noqa: BLE001 - a property that cannot be computed is not a pattern
                continue
            if isinstance(value, (list, tuple)) and len(value) == depth:
                patterns[name] = value
    return patterns


def _pinned_class(cls: type, values: dict[str, Any]) -> type:
    """A subclass of the config's class whose derived per-layer properties are fixed values."""
    return type(cls.__name__, (cls,), {"__module__": cls.__module__, "__qualname__": cls.__qualname__, **values})
