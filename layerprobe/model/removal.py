"""Blocks taken out of a model in memory, exactly as if the checkpoint had been saved without them.

Removal must look to the model's own code like a shallower checkpoint, or a family's forward would index
caches, masks or per-layer patterns by the old depth: the block list shrinks, each remaining attention module
gets its new KV-cache slot, and every config that describes the stack is made shallower with it. Nothing is
copied, and everything is put back on exit, so one loaded model serves every variant of a run.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from layerprobe.core import UnsupportedModel
from layerprobe.model.designs import designs_in_memory
from layerprobe.model.encdec import first_block_handover
from layerprobe.model.stack import LayerStack

if TYPE_CHECKING:
    from transformers import PretrainedConfig


def _configs_of(stack: LayerStack) -> list[PretrainedConfig]:
    """Every distinct config in the model that describes this stack (text_config of wrappers too)."""
    seen: dict[int, PretrainedConfig] = {}
    for module in stack.root.modules():
        config = getattr(module, "config", None)
        if config is None or id(config) in seen:
            continue
        for candidate in (config, getattr(config, "text_config", None)):
            if candidate is not None and getattr(candidate, "num_hidden_layers", None) == stack.num_layers:
                seen[id(candidate)] = candidate
    return list(seen.values())


_LAYER_INDEX = "layer_idx"  # the KV-cache slot transformers' attention modules keep


@contextlib.contextmanager
def removed_blocks(stack: LayerStack, indices: Sequence[int]) -> Iterator[LayerStack]:
    """Take blocks out of the model in memory, exactly as if the checkpoint had been saved without them.

    The ModuleList loses the blocks; every remaining block's `layer_idx` attributes (KV-cache slots)
    are renumbered; each config's `num_hidden_layers` and its per-layer lists (e.g. `layer_types`)
    shrink. Per-layer patterns a config derives from its depth (Jamba's `layer_types` from
    `attn_layer_period`/`offset`) are snapshotted at full depth and pinned to the kept blocks, so the
    shorter model does not realign them. What a design indexes by layer outside the blocks (per-layer
    inputs, shared-block maps: `designs.py`) follows the kept blocks. No weight is copied or changed, and
    everything is restored on exit, also on exceptions.
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
    restore: list[tuple[object, str, object]] = []  # (owner, attribute, value to put back)
    configs = _configs_of(stack)
    kept_indices = [i for i in range(len(original)) if i not in remove]
    designs = contextlib.ExitStack()
    try:
        if configs:  # what the design indexes by layer outside the blocks (designs.py), read at full depth
            designs.enter_context(designs_in_memory(stack.root, configs[0], kept_indices))
        for new_index, block in enumerate(kept):
            for module in block.modules():
                slot = getattr(module, _LAYER_INDEX, None)
                if isinstance(slot, int):
                    restore.append((module, _LAYER_INDEX, slot))
                    setattr(module, _LAYER_INDEX, new_index)
        for config in configs:
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
        with first_block_handover(original, kept):  # T5: the position bias block 0 owns
            yield LayerStack(stack.root, stack.path, shrunk)
    finally:
        for owner, key, value in reversed(restore):
            setattr(owner, key, value)
        designs.close()


def _derived_patterns(config: PretrainedConfig, depth: int) -> dict[str, list[object] | tuple[object, ...]]:
    """Per-layer lists a config computes from its depth (properties), e.g. Jamba's `layer_types`."""
    patterns: dict[str, list[object] | tuple[object, ...]] = {}
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


def _pinned_class(cls: type, values: dict[str, list[object] | tuple[object, ...]]) -> type:
    """A subclass of the config's class whose derived per-layer properties are fixed values."""
    return type(cls.__name__, (cls,), {"__module__": cls.__module__, "__qualname__": cls.__qualname__, **values})
