"""The shape of a design's rule: what a family indexes by layer outside its blocks, and how removal keeps it whole.

`designs.py` lists the rules and applies them; each rule is a `Design` (this module), so that rules with a
module of their own (`kv_sharing.py`) and the list share one base without a cycle.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch
    from torch import nn
    from transformers import PretrainedConfig

# A state dict as `save_pretrained` takes it: tensor name → tensor.
StateDict = dict[str, "torch.Tensor"]


class Design:
    """One design's rule for what it indexes by layer; the defaults are "nothing beyond the blocks"."""

    name = "plain"
    # Block attributes that say where a block sits (or how deep its model was), not what it computes.
    position_attributes: frozenset[str] = frozenset()
    # Whether `refusal` holds for a removal in memory too (prune-drop), not only for an exported config.
    refused_in_memory = False

    def applies(self, config: PretrainedConfig) -> bool:
        """Whether the stack described by `config` (the text config of a wrapper) has this design."""
        return False

    def positional(self, config: PretrainedConfig) -> frozenset[str]:
        """`position_attributes`, for designs where they depend on the config."""
        return self.position_attributes

    def in_memory(
        self, root: nn.Module, config: PretrainedConfig, kept: list[int]
    ) -> contextlib.AbstractContextManager:
        """What to change in the loaded model (besides the block list) while only `kept` blocks remain."""
        return contextlib.nullcontext()

    def refusal(self, config: PretrainedConfig, kept: list[int]) -> tuple[str, str] | None:
        """(why, what would work) when the kept blocks cannot be a checkpoint of this design; None if they can."""
        return None

    def config_changes(self, config: PretrainedConfig, kept: list[int]) -> dict[str, object]:
        """Config fields an export rewrites for the kept blocks, beyond the per-layer lists trimmed generically."""
        return {}

    def exported_state(self, state: StateDict, config: PretrainedConfig, kept: list[int]) -> StateDict:
        """The tensors an export writes, from those of the model with the blocks removed in memory."""
        return state

    def tied_copies(self, names: list[str], config: PretrainedConfig, kept: list[int]) -> set[str]:
        """Names (of the exported state) that the kept blocks' model ties to another tensor: not written."""
        return set()
