"""Load a checkpoint (hub id or local directory) exactly once, after refusing what would be measured wrong.

The config, the tokenizer and a weightless skeleton are cheap, so everything they can refuse is refused
before any weight is read: a model with no usable block stack, weight files that disagree with the config,
a tokenizer lm-eval cannot use. What comes back (`LoadedModel`) carries what every result records about
the model.
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from layerprobe.core import LayerprobeError, ModelNotFound, ModelSpec, UnsupportedModel
from layerprobe.model.devices import module_device, resolve_device, resolve_dtype
from layerprobe.model.encdec import teacher_forced
from layerprobe.model.facts import CAUSAL_LM, EXTRACTIVE_QA, PURPOSES, SEQ2SEQ, context_length, model_kind
from layerprobe.model.hub import quiet_transformers, translate_load_error
from layerprobe.model.kinds import head_class
from layerprobe.model.load_options import (
    check_loadable,
    from_pretrained_kwargs,
    loading_option_error,
    quantization_label,
)
from layerprobe.model.stack import LayerStack, base_of, find_layers, input_embeddings
from layerprobe.model.weights import LoadingInfo, check_files, check_loading_info, translate_weights_error

if TYPE_CHECKING:
    import torch
    from torch import nn
    from transformers import PretrainedConfig, PreTrainedModel, PreTrainedTokenizerBase


@dataclass
class LoadedModel:
    """A model ready to run, with what layerprobe needs to know about it.

    `model` is the base model (no head) for purpose "base", else the model with its head.
    `input_device` is where input ids must go (the embedding's device, also under device_map).
    """

    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    kind: str
    spec: ModelSpec
    architecture: str
    model_type: str
    commit: str | None
    dtype: str
    input_device: torch.device | None
    context_length: int | None
    attn_implementation: str | None = None  # what transformers actually uses (asked for, or its default)

    @property
    def device_label(self) -> str:
        return "device_map=auto" if self.spec.device_map else str(self.input_device)

    @property
    def quantization(self) -> str | None:
        """A label for quantized weights (None for full-precision ones); results carry it."""
        return quantization_label(self.spec.quantization)


def load_config(spec: ModelSpec) -> PretrainedConfig:
    """Only the config: cheap, and enough to reject a model that cannot do the job before loading it."""
    import transformers as tf

    if not os.path.exists(os.path.expanduser(spec.model)) and spec.model.startswith((".", "/", "~")):
        raise ModelNotFound(f"No model directory at {spec.model}.", hint="Check the path.")
    with quiet_transformers():
        try:
            return tf.AutoConfig.from_pretrained(
                spec.model, revision=spec.revision, trust_remote_code=spec.trust_remote_code
            )
        except (OSError, ValueError, KeyError) as exc:
            raise translate_load_error(exc, spec) from exc


def load_skeleton(spec: ModelSpec) -> tuple[nn.Module, str, str]:
    """The base model built from its config on the meta device: structure and sizes, no weights, no memory.

    Returns (model, architecture, kind).
    """
    config = load_config(spec)
    kind = model_kind(config)
    model = skeleton_from_config(config, spec)
    architecture = (getattr(config, "architectures", None) or [type(model).__name__])[0]
    return model, architecture, kind


def skeleton_stack(spec: ModelSpec) -> LayerStack | None:
    """The block stack `--layers-path` names, found on a weightless skeleton (None without --layers-path).

    An encoder-decoder's stack is always found here: without the option, the decoder (`encdec.choose_side`).

    A wrong path is then reported before any weight is read; without the option the stack is found
    after loading, as before (`find_layers`' search needs no check).
    """
    if not spec.layers_path and not getattr(load_config(spec), "is_encoder_decoder", False):
        return None  # an encoder-decoder's default stack (its decoder) is not the config's num_hidden_layers
    skeleton, _, _ = load_skeleton(spec)
    return find_layers(skeleton, spec.layers_path)


def load_tokenizer(spec: ModelSpec) -> PreTrainedTokenizerBase:
    """Only the tokenizer: cheap, so the corpus can be tokenized (and found too small) before any weight."""
    import transformers as tf

    with quiet_transformers():
        try:
            return tf.AutoTokenizer.from_pretrained(
                spec.model, revision=spec.revision, trust_remote_code=spec.trust_remote_code
            )
        except (OSError, ValueError, KeyError) as exc:
            raise translate_load_error(exc, spec) from exc


def skeleton_from_config(config: PretrainedConfig, spec: ModelSpec) -> nn.Module:
    """The base model of `config` on the meta device (the config is copied: building may annotate it)."""
    import transformers as tf
    from accelerate import init_empty_weights

    config = copy.deepcopy(config)
    with quiet_transformers(), init_empty_weights():
        try:
            model = tf.AutoModel.from_config(config, trust_remote_code=spec.trust_remote_code)
        except ValueError:  # a family registered for causal LM only
            model = base_of(tf.AutoModelForCausalLM.from_config(config, trust_remote_code=spec.trust_remote_code))
    return model


def check_before_loading(spec: ModelSpec, config: PretrainedConfig) -> None:
    """Refuse, from the config and the weight files' headers alone, what loading would get wrong.

    Finds the block stack in a weightless skeleton (so a model with no usable stack, ALBERT included, is
    refused before any weight is read), then compares the checkpoint's tensor names and shapes with it.
    """
    try:
        skeleton = skeleton_from_config(config, spec)
    except LayerprobeError:
        raise
    except Exception:  # noqa: BLE001 - remote code that cannot be built on meta: the load checks it instead
        return
    check_skeleton_weights(spec, skeleton, find_layers(skeleton, spec.layers_path))


def check_skeleton_weights(spec: ModelSpec, skeleton: nn.Module, stack: LayerStack) -> None:
    """The checkpoint's weight files against the skeleton's block stack (names, depth, shapes)."""
    quantized = getattr(skeleton.config, "quantization_config", None) is not None
    check_files(spec, skeleton, stack.path, stack.num_layers, quantized)


def check_tokenizer_for_harness(tokenizer: PreTrainedTokenizerBase, spec: ModelSpec) -> None:
    """lm-eval starts texts with an empty context from the BOS (or EOS) token; without either it crashes."""
    if getattr(tokenizer, "bos_token_id", None) is None and getattr(tokenizer, "eos_token_id", None) is None:
        raise LayerprobeError(
            f"The tokenizer of {spec.model} defines neither an end-of-sequence nor a beginning-of-sequence token, "
            "which lm-eval needs to score a continuation with an empty context.",
            hint='Set "eos_token" (or "bos_token") in its tokenizer_config.json (or tokenizer.add_special_tokens '
            "and save_pretrained), then re-run.",
        )


def load_model(
    spec: ModelSpec, purpose: str = "base", lm_eval: bool = False, tokenizer: PreTrainedTokenizerBase | None = None
) -> LoadedModel:
    """Load config, tokenizer (unless given: `load_tokenizer`'s) and model.

    `purpose` picks the head: "base" loads none (angular needs no logits), "head" the one matching
    the model's kind, or name a kind (causal-lm, extractive-qa) explicitly. `lm_eval`: the causal LM
    will be scored by lm-eval, so its tokenizer is checked for what lm-eval needs before weights load.
    """
    import transformers as tf

    if purpose not in PURPOSES:
        raise ValueError(f"purpose must be one of {PURPOSES}")
    check_loadable(spec)
    config = load_config(spec)
    kind = model_kind(config)
    if purpose == "head":
        purpose = kind if kind in (CAUSAL_LM, EXTRACTIVE_QA) else "base"
    if kind == SEQ2SEQ:  # every command runs the teacher-forced pass, which needs the LM head
        purpose = SEQ2SEQ
    if tokenizer is None:
        tokenizer = load_tokenizer(spec)
    with quiet_transformers():
        if lm_eval and purpose == CAUSAL_LM:
            check_tokenizer_for_harness(tokenizer, spec)
        check_before_loading(spec, config)
        device = None if spec.device_map else resolve_device(spec.device)
        dtype = resolve_dtype(spec.dtype, config, device)
        model_class = tf.AutoModel if purpose == "base" else head_class(config, purpose, spec.trust_remote_code)
        kwargs = from_pretrained_kwargs(spec, dtype, device)
        try:
            model, info = _with_loading_info(
                model_class.from_pretrained(spec.model, config=config, output_loading_info=True, **kwargs)
            )
        except ValueError as exc:
            if purpose == "base" and "Unrecognized configuration class" in str(exc):
                model, info = _with_loading_info(
                    tf.AutoModelForCausalLM.from_pretrained(
                        spec.model, config=config, output_loading_info=True, **kwargs
                    )
                )
                model = cast("PreTrainedModel", base_of(model))  # a causal LM's base model is a PreTrainedModel
            else:
                raise translate_load_error(exc, spec) from exc
        except (OSError, KeyError) as exc:
            raise translate_load_error(exc, spec) from exc
        except Exception as exc:
            translated = loading_option_error(exc, spec) or translate_weights_error(exc, spec)
            if translated is None:
                raise
            raise translated from exc
    stack = find_layers(model, spec.layers_path)
    check_loading_info(spec.model, model, info, stack.path, stack.root)  # the base, or the model (a VLM's vision tower)
    if purpose not in ("base", SEQ2SEQ):
        _refuse_untrained_head(model, info, spec)
    if device is not None and not spec.quantization:
        cast("nn.Module", model).to(device)  # transformers' stubs of PreTrainedModel.to reject a device
    model.eval()
    embeddings = input_embeddings(model)  # None for a dual encoder (CLIP): it has two
    input_device = module_device(embeddings) if embeddings is not None else device  # offloaded: the hook's
    return LoadedModel(
        model=cast("PreTrainedModel", teacher_forced(model)) if kind == SEQ2SEQ else model,
        tokenizer=tokenizer,
        kind=kind,
        spec=spec,
        architecture=(getattr(config, "architectures", None) or [type(model).__name__])[0],
        model_type=getattr(config, "model_type", "unknown"),
        commit=getattr(config, "_commit_hash", None),
        dtype=str(dtype).replace("torch.", ""),
        input_device=input_device,
        context_length=context_length(config, tokenizer),
        attn_implementation=getattr(model.config, "_attn_implementation", None) or spec.attn_implementation,
    )


def _with_loading_info(loaded: object) -> tuple[PreTrainedModel, LoadingInfo]:
    """`from_pretrained(..., output_loading_info=True)`'s (model, info) pair, typed (its stubs say: a model)."""
    return cast("tuple[PreTrainedModel, LoadingInfo]", loaded)


def _refuse_untrained_head(model: PreTrainedModel, info: LoadingInfo, spec: ModelSpec) -> None:
    """A head that the checkpoint does not contain would be random: its scores would measure nothing."""
    base = base_of(model)
    names = [name for name, child in model.named_children() if child is base] or [
        getattr(model, "base_model_prefix", "")
    ]
    missing = [k for k in info.get("missing_keys", []) if names[0] and not k.startswith(names[0] + ".")]
    if missing:
        raise UnsupportedModel(
            f"{spec.model} has no trained {type(model).__name__} head (missing: {', '.join(sorted(missing)[:3])}).",
            hint="prune-drop needs a checkpoint with its LM head (…ForCausalLM) or a "
            "question-answering head (…ForQuestionAnswering).",
        )
