"""The config of a model with some blocks removed, and the proof (on weightless models) that it builds the kept blocks.

A block's kind is not stored in one place: `layer_types` lists it per layer, but Jamba derives it from
an offset and a period, DeepSeek from `first_k_dense_replace`, Qwen-MoE from `decoder_sparse_step` and
`mlp_only_layers`. Rather than trusting a table of families, export works from what the model builds:

1. `block_signature` describes every block of the full model (`build_skeleton`: meta device, no weights):
   the class of each submodule, every parameter's and buffer's shape, and the plain attributes blocks
   derive from the config at construction (`sliding_window`, `attention_type`, `is_sliding`, …).
2. `kept_config` writes a config for the kept blocks: `num_hidden_layers`, per-layer lists trimmed,
   layer-index lists renumbered, and the derived patterns (threshold, periodic, sparse-step fields)
   solved again for the kept sequence of kinds.
3. `verify_kept_config` rebuilds the model from that config and compares, block by block, with the kept
   originals, and the whole state dict's names and shapes. Any difference — a pattern the config
   cannot express, a field no rule knows — is refused, naming the block and the fields to look at,
   instead of writing a model that would load but compute something else.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from layerprobe.core import UnsupportedModel
from layerprobe.model import (
    CAUSAL_LM,
    EXTRACTIVE_QA,
    design_config_changes,
    design_refusal,
    exported_state,
    find_layers,
    head_class,
    position_attributes,
    quiet_transformers,
    removed_blocks,
)

if TYPE_CHECKING:
    from torch import nn
    from transformers import PretrainedConfig, PreTrainedModel

# A model class found at run time by name: the checkpoint's own transformers class, or an auto class of its kind
# (they build a model differently: see `build_skeleton`).
ModelClass = Any

# Attributes that say where a block sits, not what it is: renumbered by design.
_POSITION_ATTRIBUTES = re.compile(r"^(layer_idx|layer_id|layer_index|layer_number|block_idx)$")
# Config fields worth naming when a rebuilt block does not match: they look like per-layer patterns.
_PATTERN_FIELD = re.compile(r"layer|period|offset|freq|step|pattern|interval|every|replace|window|sparse")
# Fields that are lists for reasons unrelated to layers, even when their length happens to equal L.
_NOT_PER_LAYER = {
    "architectures",
    "eos_token_id",
    "bos_token_id",
    "pad_token_id",
    "bad_words_ids",
    "suppress_tokens",
    "begin_suppress_tokens",
    "forced_decoder_ids",
    "mrope_section",
}


class PatternRule(Protocol):
    """A per-layer pattern a config derives from a few fields instead of listing it layer by layer."""

    def applies(self, config: PretrainedConfig) -> bool:
        """Whether `config` has the fields this rule reads."""
        ...

    def pattern(self, config: PretrainedConfig, num_layers: int) -> list[bool]:
        """The feature of each of the `num_layers` layers, as `config` derives it."""
        ...

    def solve(self, config: PretrainedConfig, kept_pattern: list[bool]) -> Mapping[str, int | list[int]] | None:
        """Field values that derive `kept_pattern` for the kept layers ({}: `config` already does); None: none do."""
        ...


@dataclass(frozen=True)
class ThresholdRule:
    """Layer i has the feature iff i >= config.<field> (DeepSeek's first_k_dense_replace, Qwen2's max_window_layers)."""

    field: str

    def applies(self, config: PretrainedConfig) -> bool:
        return isinstance(getattr(config, self.field, None), int)

    def pattern(self, config: PretrainedConfig, num_layers: int) -> list[bool]:
        return [i >= getattr(config, self.field) for i in range(num_layers)]

    def solve(self, config: PretrainedConfig, kept_pattern: list[bool]) -> dict[str, int] | None:
        # A threshold pattern stays a threshold pattern under deletion: count the kept layers below it.
        first = kept_pattern.index(True) if True in kept_pattern else len(kept_pattern)
        if any(not flag for flag in kept_pattern[first:]):
            return None
        old = getattr(config, self.field)
        return {self.field: first if first < len(kept_pattern) else max(old, len(kept_pattern))}


@dataclass(frozen=True)
class PeriodicRule:
    """Layer i has the feature iff i % config.<period> == config.<offset> (Jamba's attention and experts)."""

    period: str
    offset: str

    def applies(self, config: PretrainedConfig) -> bool:
        return all(isinstance(getattr(config, name, None), int) for name in (self.period, self.offset))

    def pattern(self, config: PretrainedConfig, num_layers: int) -> list[bool]:
        period, offset = getattr(config, self.period), getattr(config, self.offset)
        return [period > 0 and i % period == offset for i in range(num_layers)]

    def solve(self, config: PretrainedConfig, kept_pattern: list[bool]) -> dict[str, int] | None:
        n = len(kept_pattern)
        old = (getattr(config, self.period), getattr(config, self.offset))
        candidates = [old] + [(p, o) for p in range(1, max(n, old[0]) + 1) for o in range(p)]
        for period, offset in candidates:
            if [i % period == offset for i in range(n)] == kept_pattern:
                return {self.period: period, self.offset: offset}
        return None


@dataclass(frozen=True)
class SparseStepRule:
    """Layer i is sparse iff i not in config.<exclude> and (i+1) % config.<step> == 0 (Qwen-MoE)."""

    step: str
    exclude: str

    def applies(self, config: PretrainedConfig) -> bool:
        return isinstance(getattr(config, self.step, None), int) and isinstance(
            getattr(config, self.exclude, None), (list, tuple)
        )

    def pattern(self, config: PretrainedConfig, num_layers: int) -> list[bool]:
        step, exclude = getattr(config, self.step), set(getattr(config, self.exclude))
        return [i not in exclude and step > 0 and (i + 1) % step == 0 for i in range(num_layers)]

    def solve(self, config: PretrainedConfig, kept_pattern: list[bool]) -> dict[str, int | list[int]] | None:
        # The renumbered exclude list is already in `config`; keep the step if it still fits, else list
        # every dense layer explicitly with a step of 1.
        step, exclude = getattr(config, self.step), set(getattr(config, self.exclude))
        if [i not in exclude and (i + 1) % step == 0 for i in range(len(kept_pattern))] == kept_pattern:
            return {}
        return {self.step: 1, self.exclude: [i for i, sparse in enumerate(kept_pattern) if not sparse]}


RULES: tuple[PatternRule, ...] = (
    ThresholdRule("first_k_dense_replace"),
    ThresholdRule("max_window_layers"),
    PeriodicRule("attn_layer_period", "attn_layer_offset"),
    PeriodicRule("expert_layer_period", "expert_layer_offset"),
    SparseStepRule("decoder_sparse_step", "mlp_only_layers"),
)


def stack_config(
    config: PretrainedConfig, num_layers: int, count: str = "num_hidden_layers", *, sub: str | None = None
) -> PretrainedConfig:
    """The (sub)config that describes the block stack: `sub` if named, else the config or its text_config.

    `count` is the field that counts the stack's blocks (an encoder-decoder's side: `encdec.count_field`);
    `sub` is a vision tower's sub-config (`model.tower_config_name`).
    """
    for candidate in (getattr(config, sub, None),) if sub else (config, getattr(config, "text_config", None)):
        if candidate is not None and getattr(candidate, count, None) == num_layers:
            return candidate
    raise UnsupportedModel(
        f"The config of {type(config).__name__} does not say {count} = {num_layers}.",
        hint=f"Export needs a config whose {count} counts the blocks it removes.",
    )


def kept_config(
    config: PretrainedConfig,
    num_layers: int,
    kept: list[int],
    count: str = "num_hidden_layers",
    *,
    sub: str | None = None,
) -> tuple[PretrainedConfig, dict[str, object]]:
    """A deep copy of `config` describing only the `kept` blocks (0-based indices into the full model).

    `count` names the field that counts the stack's blocks (T5's decoder: `num_decoder_layers`); `sub`
    names the sub-config of the stack when it is not the text one (`model.tower_config_name`: a vision
    tower's). Returns the new config and the changed fields ({name: new value}) for the record.
    """
    new = copy.deepcopy(config)
    target = stack_config(new, num_layers, count, sub=sub)
    old = stack_config(config, num_layers, count, sub=sub)
    renumber = {old_index: new_index for new_index, old_index in enumerate(kept)}
    changed: dict[str, object] = {count: len(kept)}
    for key, value in list(vars(old).items()):
        if key.startswith("_") or key in _NOT_PER_LAYER:
            continue
        trimmed = _kept_values(key, value, num_layers, kept, renumber)
        if trimmed is not None:
            changed[key] = trimmed
    refused = design_refusal(old, kept)
    if refused is not None:
        raise UnsupportedModel(refused[0], hint=refused[1])
    changed.update(design_config_changes(old, kept))
    for key, value in changed.items():
        setattr(target, key, value)
    for rule in RULES:
        if not rule.applies(old):
            continue
        full = rule.pattern(old, num_layers)
        solved = rule.solve(target, [full[i] for i in kept])
        if solved is None:
            fields = ", ".join(f for f in vars(rule).values())
            raise UnsupportedModel(
                f"The config cannot describe the kept blocks: {fields} define a pattern that removing these "
                "blocks breaks, and the config has no per-layer list to say it instead.",
                hint="Remove a different set of blocks (e.g. whole periods of the pattern).",
            )
        for key, value in solved.items():
            setattr(target, key, value)
            changed[key] = value
    return new, changed


def _kept_values(key: str, value: object, num_layers: int, kept: list[int], renumber: dict[int, int]) -> object:
    """A per-layer list trimmed, a list of layer indices renumbered, or None for anything else."""
    if isinstance(value, str) and "pattern" in key and len(value) == num_layers:
        return "".join(value[i] for i in kept)  # e.g. Nemotron-H's hybrid_override_pattern: one letter a layer
    if not isinstance(value, (list, tuple)) or not value:
        return None
    is_index_list = (
        "layer" in key
        and all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v < num_layers for v in value)
        and (len(value) != num_layers or list(value) == list(range(num_layers)))
    )
    if is_index_list:
        return type(value)(renumber[v] for v in value if v in renumber)
    if len(value) == num_layers:
        return type(value)(value[i] for i in kept)
    return None


def block_signature(block: nn.Module, positional: frozenset[str] = frozenset()) -> dict[str, object]:
    """What a block is, independent of where it sits: submodule classes, tensor shapes, config-derived attributes.

    `positional`: attributes the model's design renumbers or derives from its depth (`model.position_attributes`).
    """
    signature: dict[str, object] = {}
    for name, module in block.named_modules():
        prefix = f"{name}." if name else ""
        if positional.intersection(name.split(".")):
            continue  # a list the design renumbers (adapters per layer): compared as tensors after its rule
        signature[f"{prefix}<class>"] = type(module).__name__
        for attr, value in vars(module).items():
            if attr.startswith("_") or attr == "training" or _POSITION_ATTRIBUTES.match(attr) or attr in positional:
                continue
            if value is None or isinstance(value, (bool, int, float, str)):
                signature[prefix + attr] = value
            elif isinstance(value, (list, tuple)) and all(isinstance(v, (bool, int, float, str)) for v in value):
                signature[prefix + attr] = tuple(value)
    for name, tensor in [*block.named_parameters(), *block.named_buffers()]:
        if not positional.intersection(name.split(".")):
            signature[name] = tuple(tensor.shape)
    return signature


def first_difference(expected: dict[str, object], actual: dict[str, object]) -> str | None:
    """The first key where two signatures differ, described for a message; None when they agree."""
    for key in sorted(set(expected) | set(actual)):
        if expected.get(key, "<absent>") != actual.get(key, "<absent>"):
            return f"{key}: {expected.get(key, '<absent>')!r} in the original, {actual.get(key, '<absent>')!r} rebuilt"
    return None


def pattern_fields(config: PretrainedConfig) -> list[str]:
    """The config fields that look like per-layer patterns (for naming in a refusal)."""
    return sorted(
        key
        for key, value in vars(config).items()
        if not key.startswith("_")
        and key != "num_hidden_layers"
        and _PATTERN_FIELD.search(key)
        and isinstance(value, (int, str, list, tuple))
    )


def model_class_for(config: PretrainedConfig, kind: str, trust_remote_code: bool) -> ModelClass:
    """The checkpoint's own class (its `architectures`), else the auto class of its kind."""
    import transformers as tf

    architectures = getattr(config, "architectures", None) or []
    if architectures and not trust_remote_code and hasattr(tf, architectures[0]):
        return getattr(tf, architectures[0])
    if kind in (CAUSAL_LM, EXTRACTIVE_QA):
        return head_class(config, kind, trust_remote_code)
    return tf.AutoModel


def build_skeleton(
    model_class: ModelClass, config: PretrainedConfig, trust_remote_code: bool = False
) -> PreTrainedModel:
    """The model built from `config` on the meta device: every module and shape, no weights, no memory."""
    from accelerate import init_empty_weights

    with quiet_transformers(), init_empty_weights():
        if model_class.__module__.startswith("transformers.models.auto"):
            return model_class.from_config(config, trust_remote_code=trust_remote_code)
        return model_class._from_config(config)


def verify_kept_config(
    skeleton: PreTrainedModel,
    path: str,
    removed: list[int],
    model_class: ModelClass,
    new_config: PretrainedConfig,
    trust_remote_code: bool = False,
    count: str = "num_hidden_layers",
    *,
    sub: str | None = None,
) -> None:
    """Refuse unless the model built from `new_config` has the kept blocks and the same tensors.

    Compares block by block (classes, shapes, config-derived attributes such as sliding windows) and
    the whole state dict (names and shapes), so a derived per-layer pattern the config got wrong, or
    a field no rule knows, is caught before any weight is read.
    """
    stack = find_layers(skeleton, path)
    old = stack_config(skeleton.config, stack.num_layers, count, sub=sub)
    kept = [i for i in range(stack.num_layers) if i not in set(removed)]
    positional = position_attributes(old)
    with removed_blocks(stack, removed) as shrunk:  # as removal leaves them (T5: block 0's bias handed on)
        expected_blocks = [block_signature(b, positional) for b in shrunk.blocks]
    rebuilt = build_skeleton(model_class, new_config, trust_remote_code)
    rebuilt_stack = find_layers(rebuilt, path)
    fields = ", ".join(pattern_fields(stack_config(new_config, len(expected_blocks), count, sub=sub))) or "none found"
    if len(rebuilt_stack.blocks) != len(expected_blocks):
        raise UnsupportedModel(
            f"The config written for the kept blocks builds {len(rebuilt_stack.blocks)} blocks, not "
            f"{len(expected_blocks)}.",
            hint=f"Check the config fields that count layers ({fields}).",
        )
    for new_index, (expected, block) in enumerate(zip(expected_blocks, rebuilt_stack.blocks, strict=True)):
        difference = first_difference(expected, block_signature(block, positional))
        if difference:
            raise UnsupportedModel(
                f"The config written for the kept blocks builds a different block {new_index} ({difference}): "
                "the config cannot express the kept pattern.",
                hint=f"Check the per-layer config fields ({fields}) or remove a different set of blocks.",
            )
    with removed_blocks(stack, removed):
        expected = {
            k: tuple(v.shape) for k, v in exported_state(skeleton.state_dict(), old, kept, untied=False).items()
        }
    actual = {k: tuple(v.shape) for k, v in rebuilt.state_dict().items()}
    if expected != actual:
        keys = sorted(k for k in set(expected) | set(actual) if expected.get(k) != actual.get(k))
        raise UnsupportedModel(
            f"The model rebuilt for the kept blocks has different tensors ({', '.join(keys[:3])}…).",
            hint=f"A part outside the blocks depends on the layer count; check the config fields ({fields}).",
        )
