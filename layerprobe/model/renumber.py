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
