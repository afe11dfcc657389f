"""Layer indices that designs keep outside their blocks, renumbered to the kept blocks while blocks are removed.

`designs.py` says which design holds which; these helpers change the live objects and put them back on exit.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import nn
    from transformers import PretrainedConfig


@contextlib.contextmanager
def renumbered_maps(root: nn.Module, renumber: dict[int, int]) -> Iterator[None]:
    """Every `layer_dic` (layer → slot) and `layer_block_map` (layers) in `root` renumbered; restored on exit."""
    restore: list[tuple[object, str, object]] = []
    try:
        for module in root.modules():
            for attribute in ("layer_dic", "layer_block_map"):
                value = getattr(module, attribute, None)
                new: object
                if isinstance(value, dict):
                    new = {renumber[layer]: slot for layer, slot in value.items() if layer in renumber}
                elif isinstance(value, (list, tuple)):
                    new = type(value)(renumber[layer] for layer in value if layer in renumber)
                else:
                    continue
                restore.append((module, attribute, value))
                setattr(module, attribute, new)
        yield
    finally:
        for owner, key, value in reversed(restore):
            setattr(owner, key, value)


def renumbered(indices: list[int] | tuple[int, ...], kept: list[int]) -> list[int]:
    """Layer indices renumbered to the kept blocks, those of removed blocks left out."""
    renumber = {old: new for new, old in enumerate(kept)}
    return [renumber[i] for i in indices if i in renumber]


@contextlib.contextmanager
def renumbered_lists(root: nn.Module, config: PretrainedConfig, attribute: str, kept: list[int]) -> Iterator[None]:
    """`attribute` (a list of layer indices) renumbered on `config` and every module of `root`; restored on exit."""
    owners = [config, *(m for m in root.modules() if isinstance(getattr(m, attribute, None), (list, tuple)))]
    unique = {id(owner): owner for owner in owners}.values()  # configs are not hashable
    restore = [(owner, getattr(owner, attribute)) for owner in unique]
    try:
        for owner, value in restore:
            setattr(owner, attribute, renumbered(value, kept))
        yield
    finally:
        for owner, value in reversed(restore):
            setattr(owner, attribute, value)


def spans_text(indices: list[int]) -> str:
    """Block indices as the --remove / --layers syntax writes them: 1,3-5."""
    spans: list[list[int]] = []
    for index in sorted(indices):
        if spans and index == spans[-1][1] + 1:
            spans[-1][1] = index
        else:
            spans.append([index, index])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


def blocks_text(indices: list[int]) -> str:
    """The words for some blocks: block 3, blocks 1,3-5."""
    return f"block{'s' if len(indices) > 1 else ''} {spans_text(indices)}"


@contextlib.contextmanager
def shared_kv_flags(root: nn.Module, modes: dict[int, str | None], first_shared: int) -> Iterator[None]:
    """Kept attentions' `store_full_length_kv` from `modes` (old index → mode); restored on exit.

    The model's `first_kv_shared_layer_idx` (where Gemma-4 may cut the sequence to the kept logits)
    follows the kept blocks' first sharing one.
    """
    restore: list[tuple[object, str, object]] = []
    try:
        for module in root.modules():
            index = getattr(module, "layer_idx", None)
            if hasattr(module, "store_full_length_kv") and index in modes:
                restore.append((module, "store_full_length_kv", getattr(module, "store_full_length_kv")))  # noqa: B009
                setattr(module, "store_full_length_kv", modes[index] == "store")  # noqa: B010 - a plain attribute
            shared_from = getattr(module, "first_kv_shared_layer_idx", None)
            if isinstance(shared_from, int):
                restore.append((module, "first_kv_shared_layer_idx", shared_from))
                setattr(module, "first_kv_shared_layer_idx", first_shared)  # noqa: B010 - a plain attribute
        yield
    finally:
        for owner, key, value in reversed(restore):
            setattr(owner, key, value)
