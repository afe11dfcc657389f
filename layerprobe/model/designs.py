"""What each model design indexes by layer outside its blocks, and how removing blocks renumbers it.

Removing blocks shrinks the block list, renumbers the KV-cache slots and trims per-layer config lists
(`removal.py`); most families need nothing else. Some designs index by layer outside the blocks, and each
gets one rule here, used by all three places that remove blocks — in memory (`removal.removed_blocks`,
both engines), in the config an export writes, and in the tensors it writes (`export`):

- per-layer inputs (Gemma-3n, Gemma-4): one embedding and one projection whose outputs hold a slice per
  layer, reshaped with the layer count — the kept layers' slices are selected (hooks in memory, the
  weights' rows or columns in an export);
- shared-block maps (Zamba2): shared transformer blocks look their adapters up by layer index
  (`layer_dic`), renumbered to the kept layers; an export drops the removed layers' adapters;
- heterogeneous configs (`per_layer_config`, Gemma-4): per-layer overrides keyed by layer index, renumbered;
- a last block that must be full attention (Gemma-4): a kept set ending on a sliding block is refused;
- KV sharing (Gemma-3n, Gemma-4): the count of blocks reusing earlier keys and values, renumbered, and the
  store of each attention type moved to the last kept block of that type before them (in memory: flags);
- image-only block indices (mllama's `cross_attention_layers`): renumbered to the kept blocks;
- depth-derived saved buffers (MiniMax's lightning attention): blocks remember the depth they were built
  for, but what they derive from it is saved with the weights, so the exported blocks compute as before.

A design that truly cannot lose a block refuses in one line (`refusal`) saying why and what would work.
The per-layer patterns a config derives from a few fields (Jamba's period and offset, DeepSeek's
threshold, Qwen-MoE's sparse step) are the config half of the same question and stay with the export's
config solver (`export/config.py`), which every design's config changes feed.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from layerprobe.model.design_rule import Design, StateDict
from layerprobe.model.kv_sharing import KVSharing
from layerprobe.model.renumber import (
    renumbered,
    renumbered_lists,
    renumbered_maps,
)

if TYPE_CHECKING:
    import torch
    from torch import nn
    from transformers import PretrainedConfig


class PerLayerInputs(Design):
    """Gemma-3n, Gemma-4: `embed_tokens_per_layer` and `per_layer_model_projection` give every layer a slice.

    Their outputs are `num_hidden_layers × hidden_size_per_layer_input` wide and reshaped with the layer
    count; block i reads slice i. Removing blocks keeps the kept blocks' slices, in order.
    """

    name = "per-layer inputs"
    modules = ("embed_tokens_per_layer", "per_layer_model_projection")

    def applies(self, config: PretrainedConfig) -> bool:
        return bool(getattr(config, "hidden_size_per_layer_input", 0)) and hasattr(config, "vocab_size_per_layer_input")

    def in_memory(
        self, root: nn.Module, config: PretrainedConfig, kept: list[int]
    ) -> contextlib.AbstractContextManager:
        width = config.hidden_size_per_layer_input
        return _output_hooks(root, self.modules, lambda out: _kept_slices(out, -1, kept, width))

    def exported_state(self, state: StateDict, config: PretrainedConfig, kept: list[int]) -> StateDict:
        width = config.hidden_size_per_layer_input
        # The embedding's weight is (vocab, L·w): its columns; the projection's (L·w, hidden): its rows.
        axes = {"embed_tokens_per_layer.weight": -1, "per_layer_model_projection.weight": 0}
        out = dict(state)
        for name, tensor in state.items():
            for suffix, axis in axes.items():
                if name == suffix or name.endswith("." + suffix):
                    out[name] = _kept_slices(tensor, axis, kept, width).contiguous()
        return out


class SharedBlockMap(Design):
    """Zamba2: shared transformer blocks find the adapter of the hybrid layer calling them by its index.

    Every shared block holds `layer_dic` (layer index → adapter slot) and `layer_block_map` (the hybrid
    layers' indices); the model passes each block its position in the list. In memory the map is renumbered
    to the kept layers (each kept hybrid layer keeps its own adapter); an export lists the kept hybrid
    layers and drops the removed ones' adapters.
    """

    name = "shared-block map"
    # The adapter lists hold one adapter per hybrid layer: renumbered by `exported_state`, not compared.
    position_attributes = frozenset(
        {
            "layer_block_map",
            "num_fwd_mem_blocks",
            "gate_up_proj_adapter_list",
            "linear_q_adapter_list",
            "linear_k_adapter_list",
            "linear_v_adapter_list",
        }
    )

    def applies(self, config: PretrainedConfig) -> bool:
        return isinstance(getattr(config, "hybrid_layer_ids", None), (list, tuple)) and hasattr(
            config, "num_mem_blocks"
        )

    def in_memory(
        self, root: nn.Module, config: PretrainedConfig, kept: list[int]
    ) -> contextlib.AbstractContextManager:
        renumber = {old: new for new, old in enumerate(kept)}
        return renumbered_maps(root, renumber)

    def refusal(self, config: PretrainedConfig, kept: list[int]) -> tuple[str, str] | None:
        cycle = getattr(config, "num_mem_blocks", 1)
        hybrid = list(config.hybrid_layer_ids)
        removed = [position for position, layer in enumerate(hybrid) if layer not in set(kept)]
        if cycle > 1 and len(removed) % cycle:
            return (
                f"{config.model_type} cycles its {cycle} shared blocks over the hybrid layers "
                f"({', '.join(map(str, hybrid))}): removing {len(removed)} of them shifts which shared block every "
                "later hybrid layer uses, which its config cannot say.",
                f"Remove hybrid layers {cycle} at a time, or only Mamba blocks (any block not in {hybrid}).",
            )
        return None

    def exported_state(self, state: StateDict, config: PretrainedConfig, kept: list[int]) -> StateDict:
        hybrid = list(config.hybrid_layer_ids)
        slots = {old: new for new, old in enumerate(p for p, layer in enumerate(hybrid) if layer in set(kept))}
        pattern = re.compile(r"(_adapter_list\.)(\d+)(\.)")
        out: StateDict = {}
        for name, tensor in state.items():
            match = pattern.search(name)
            if match is None:
                out[name] = tensor
            elif int(match.group(2)) in slots:
                out[pattern.sub(lambda m: f"{m.group(1)}{slots[int(m.group(2))]}{m.group(3)}", name, count=1)] = tensor
        return out

    def tied_copies(self, names: list[str], config: PretrainedConfig, kept: list[int]) -> set[str]:
        # The shared blocks live in the first `num_mem_blocks` hybrid layers; the later ones are ties to them.
        renumber = {old: new for new, old in enumerate(kept)}
        later = {renumber[layer] for layer in config.hybrid_layer_ids if layer in renumber}
        later = set(sorted(later)[getattr(config, "num_mem_blocks", 1) :])
        pattern = re.compile(r"(?:^|\.)layers\.(\d+)\.shared_transformer\.")
        return {name for name in names if (match := pattern.search(name)) and int(match.group(1)) in later}


class HeterogeneousConfig(Design):
    """Configs with `per_layer_config` (Gemma-4): overrides keyed by layer index, renumbered to the kept blocks."""

    name = "per-layer config"

    def applies(self, config: PretrainedConfig) -> bool:
        return bool(_per_layer_overrides(config))

    def config_changes(self, config: PretrainedConfig, kept: list[int]) -> dict[str, object]:
        overrides = _per_layer_overrides(config)
        renumbered = {str(new): overrides[str(old)] for new, old in enumerate(kept) if str(old) in overrides}
        return {"per_layer_config": renumbered}


class LastBlockFull(Design):
    """Gemma-4: its config forces the last block to full attention, so a kept set must end on a full one."""

    name = "last block full attention"

    def applies(self, config: PretrainedConfig) -> bool:
        return getattr(config, "model_type", "") in ("gemma4", "gemma4_text")

    def refusal(self, config: PretrainedConfig, kept: list[int]) -> tuple[str, str] | None:
        types = list(getattr(config, "layer_types", None) or [])
        if not types or types[kept[-1]] == "full_attention":
            return None
        full = [i for i in kept if types[i] == "full_attention"]
        depth = len(types)
        fix = (
            f"also remove the blocks after block {full[-1]}, the last full-attention block kept (--remove "
            f"{full[-1] + 1}-{depth - 1} with the others)"
            if full
            else "keep a full-attention block"
        )
        return (
            f"{config.model_type} makes its last block full attention: without these blocks block {kept[-1]} "
            "(sliding attention) would come last and be rebuilt as a different block.",
            f"Keep the last full-attention block, or {fix}.",
        )


class SavedDepthBuffers(Design):
    """MiniMax: lightning-attention blocks derive their decay rates from their index and the model's depth.

    The rates are persistent buffers, saved with the weights and loaded back, so an exported block computes
    what it did at its old position; its `num_hidden_layers` attribute only says how deep the model was.
    """

    name = "saved depth buffers"
    position_attributes = frozenset({"num_hidden_layers"})

    def applies(self, config: PretrainedConfig) -> bool:
        return getattr(config, "model_type", "") == "minimax"


class CrossAttentionIndices(Design):
    """mllama: `cross_attention_layers` lists the blocks that attend to an image, by index.

    The text model keeps that list (the config's own list object) and skips those blocks without an image;
    the config rebuilds them as cross-attention blocks. Removing blocks renumbers it to the kept blocks
    (a removed cross-attention block leaves it), in memory on every module and config that holds it, and in
    an export's config.
    """

    name = "cross-attention indices"

    def applies(self, config: PretrainedConfig) -> bool:
        return isinstance(getattr(config, "cross_attention_layers", None), (list, tuple))

    def in_memory(
        self, root: nn.Module, config: PretrainedConfig, kept: list[int]
    ) -> contextlib.AbstractContextManager:
        return renumbered_lists(root, config, "cross_attention_layers", kept)

    def config_changes(self, config: PretrainedConfig, kept: list[int]) -> dict[str, object]:
        return {"cross_attention_layers": renumbered(config.cross_attention_layers, kept)}


DESIGNS: list[Design] = [
    PerLayerInputs(),
    SharedBlockMap(),
    HeterogeneousConfig(),
    LastBlockFull(),
    KVSharing(every_rule=lambda config, kept: refusal(config, kept)),  # all rules, as they are when it runs
    SavedDepthBuffers(),
    CrossAttentionIndices(),
]


def register_design(design: Design) -> None:
    """Add a design's rule (later rules see the state earlier ones wrote)."""
    DESIGNS.append(design)


def designs_of(config: PretrainedConfig) -> list[Design]:
    """The designs whose rules apply to the stack `config` describes."""
    return [design for design in DESIGNS if design.applies(config)]


def position_attributes(config: PretrainedConfig) -> frozenset[str]:
    """Block attributes that say where a block sits in a model of this design (renumbered, not compared)."""
    return frozenset().union(*(design.positional(config) for design in designs_of(config)))


def refusal(config: PretrainedConfig, kept: list[int]) -> tuple[str, str] | None:
    """The first design's (why, what would work) if the kept blocks cannot be exported; None if they can."""
    return next((found for design in designs_of(config) if (found := design.refusal(config, kept))), None)


def memory_refusal(config: PretrainedConfig, kept: list[int]) -> tuple[str, str] | None:
    """Like `refusal`, for a removal in memory (prune-drop's variants): only designs that cannot run without them."""
    designs = [design for design in designs_of(config) if design.refused_in_memory]
    return next((found for design in designs if (found := design.refusal(config, kept))), None)


def design_config_changes(config: PretrainedConfig, kept: list[int]) -> dict[str, object]:
    """Every design's config changes for the kept blocks."""
    changes: dict[str, object] = {}
    for design in designs_of(config):
        changes.update(design.config_changes(config, kept))
    return changes


def exported_state(state: StateDict, config: PretrainedConfig, kept: list[int], *, untied: bool = True) -> StateDict:
    """The state dict an export writes, after every design's rule (the input is not changed).

    `untied` leaves out the tensors the kept blocks' model ties to others (they load as ties);
    False keeps every name, as a model's own `state_dict()` lists them.
    """
    designs = designs_of(config)
    for design in designs:
        state = design.exported_state(state, config, kept)
    if untied:
        tied = set().union(*(design.tied_copies(list(state), config, kept) for design in designs))
        state = {name: tensor for name, tensor in state.items() if name not in tied}
    return state


@contextlib.contextmanager
def designs_in_memory(root: nn.Module, config: PretrainedConfig, kept: list[int]) -> Iterator[None]:
    """Every design's in-memory changes while only `kept` blocks remain; all undone on exit."""
    with contextlib.ExitStack() as stack:
        for design in designs_of(config):
            stack.enter_context(design.in_memory(root, config, kept))
        yield


def _per_layer_overrides(config: PretrainedConfig) -> Mapping[str, Any]:
    """`per_layer_config` as the config serialises it ({"3": {...}}), or {} for a homogeneous config."""
    if not getattr(config, "is_heterogeneous", False):
        return {}
    overrides = config.to_dict().get("per_layer_config") or {}
    return {str(int(key)): value for key, value in overrides.items()}


def _kept_slices(tensor: torch.Tensor, axis: int, kept: list[int], width: int) -> torch.Tensor:
    """The kept layers' `width`-wide slices of `axis` (laid out layer after layer), in order."""
    import torch

    axis = axis % tensor.dim()
    index = torch.tensor([layer * width + j for layer in kept for j in range(width)], device=tensor.device)
    return tensor.index_select(axis, index)


@contextlib.contextmanager
def _output_hooks(root: nn.Module, names: tuple[str, ...], change: Any) -> Iterator[None]:
    """Forward hooks replacing the output of every submodule of `root` whose own name is in `names`."""
    handles = [
        module.register_forward_hook(lambda _m, _a, output: change(output))
        for path, module in root.named_modules()
        if path.rpartition(".")[2] in names
    ]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()
