"""KV sharing (Gemma-3n, Gemma-4): the last blocks reuse the keys and values of an earlier block of their type.

Removing blocks renumbers the count of sharing blocks and moves each attention type's store to the last kept
block of that type before them; removing the only such block is refused in one line (docs/methods.md).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from layerprobe.core import UnsupportedModel
from layerprobe.model.design_rule import Design
from layerprobe.model.renumber import blocks_text, shared_kv_flags, spans_text

if TYPE_CHECKING:
    from torch import nn
    from transformers import PretrainedConfig


class KVSharing(Design):
    """Gemma-3n, Gemma-4: the last `num_kv_shared_layers` blocks reuse the keys and values of earlier ones.

    The last block of each attention type before the sharing blocks stores its keys and values, and each
    sharing block reads those of its type. Removing blocks renumbers the count of sharing blocks, and the
    store falls to the last kept block of each type before them (the config's own rule, applied to the
    kept blocks) — in memory the kept blocks' store flags are set so, as a rebuilt model's would be. A
    kept set with sharing blocks of a type but no block of that type before them has nothing to reuse:
    refused, in memory and on export. The store flag says where a block sits, never what it computes.
    """

    name = "kv sharing"
    position_attributes = frozenset({"store_full_length_kv"})
    refused_in_memory = True  # no block would compute what the sharing blocks read

    def __init__(self, every_rule: Callable[[PretrainedConfig, list[int]], tuple[str, str] | None]) -> None:
        """`every_rule`: the refusal of all designs' rules (`designs.refusal`), to offer only a fix they allow."""
        self.every_rule = every_rule

    def applies(self, config: PretrainedConfig) -> bool:
        return isinstance(getattr(config, "num_kv_shared_layers", None), int) and hasattr(config, "kv_sharing_modes")

    def _kept_fields(self, config: PretrainedConfig, kept: list[int]) -> dict[str, Any]:
        """The fields the sharing rule reads, for the model of the kept blocks."""
        first = config.num_hidden_layers - config.num_kv_shared_layers
        types = list(config.layer_types)
        return {
            "num_hidden_layers": len(kept),
            "num_kv_shared_layers": sum(1 for i in kept if i >= first),
            "layer_types": [types[i] for i in kept],
        }

    def _kept_modes(self, config: PretrainedConfig, kept: list[int]) -> list[str | None] | None:
        """Each kept block's sharing mode (None, "store", "reuse") by the config class's own rule; None if it fails."""
        from types import SimpleNamespace

        rule: property = getattr(type(config), "kv_sharing_modes")  # noqa: B009 - a property of some configs
        try:
            return list(rule.__get__(SimpleNamespace(**self._kept_fields(config, kept))))
        except ValueError:  # a type of sharing block with no block of its type left to store for it
            return None

    def refusal(self, config: PretrainedConfig, kept: list[int]) -> tuple[str, str] | None:
        if config.num_kv_shared_layers == 0 or self._kept_modes(config, kept) is not None:
            return None
        first = config.num_hidden_layers - config.num_kv_shared_layers
        types = list(config.layer_types)
        stored = {types[i] for i in kept if i < first}
        orphans = [i for i in kept if i >= first and types[i] not in stored]
        missing = sorted({types[i] for i in orphans})
        producers = [i for i in range(first) if types[i] in missing and i not in kept]
        why = (
            f"{config.model_type}'s {blocks_text(orphans)} {'reuses' if len(orphans) == 1 else 'reuse'} the "
            f"keys and values of the last {' / '.join(missing)} "
            f"block before the KV-sharing blocks ({spans_text(list(range(first, config.num_hidden_layers)))}): "
            f"without {blocks_text(producers)} no block computes them."
        )
        fix = f"Keep {'one of ' if len(producers) > 1 else ''}{blocks_text(producers)}"
        alternative = [i for i in kept if i not in orphans]
        if alternative and self.every_rule(config, alternative) is None:
            fix += f", or also remove {blocks_text(orphans)}"
        return why, fix + " (prune-drop: --layers without them)."

    def in_memory(
        self, root: nn.Module, config: PretrainedConfig, kept: list[int]
    ) -> contextlib.AbstractContextManager:
        if config.num_kv_shared_layers == 0:
            return contextlib.nullcontext()
        refused = self.refusal(config, kept)
        if refused is not None:
            raise UnsupportedModel(refused[0], hint=refused[1])
        modes = dict(zip(kept, self._kept_modes(config, kept) or [], strict=True))
        first = self._kept_fields(config, kept)["num_kv_shared_layers"]
        return shared_kv_flags(root, modes, len(kept) - first)

    def config_changes(self, config: PretrainedConfig, kept: list[int]) -> dict[str, object]:
        if config.num_kv_shared_layers == 0:
            return {}
        return {"num_kv_shared_layers": self._kept_fields(config, kept)["num_kv_shared_layers"]}
