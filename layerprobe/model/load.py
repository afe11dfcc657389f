"""Load a checkpoint (hub id or local directory) exactly once, and say what it is.

`kind` is decided from the config, never from the name: a BERT fine-tuned for SQuAD is an
extractive-QA model whatever it is called. Every way loading can fail because of the user's input
(unknown id, gated repo, offline, remote code not trusted) becomes a one-line `ModelNotFound`.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import logging
import os
from dataclasses import dataclass
from typing import Any

from layerprobe.core import LayerprobeError, ModelNotFound, ModelSpec, UnsupportedModel, hub_offline, offline_model_hint
from layerprobe.model.stack import base_of, find_layers
from layerprobe.model.weights import check_files, check_loading_info, translate_weights_error

CAUSAL_LM, ENCODER, EXTRACTIVE_QA = "causal-lm", "encoder", "extractive-qa"
MASKED_LM = "masked-lm"  # an encoder with its pretraining head (depth --grad)
PURPOSES = ("base", "head", CAUSAL_LM, EXTRACTIVE_QA, MASKED_LM)


@dataclass
class LoadedModel:
    """A model ready to run, with what layerprobe needs to know about it.

    `model` is the base model (no head) for purpose "base", else the model with its head.
    `input_device` is where input ids must go (the embedding's device, also under device_map).
    """

    model: Any
    tokenizer: Any
    kind: str
    spec: ModelSpec
    architecture: str
    model_type: str
    commit: str | None
    dtype: str
    input_device: Any
    context_length: int | None
    attn_implementation: str | None = None  # what transformers actually uses (asked for, or its default)

    @property
    def device_label(self) -> str:
        return "device_map=auto" if self.spec.device_map else str(self.input_device)

    @property
    def quantization(self) -> str | None:
        """A label for quantized weights (None for full-precision ones); results carry it."""
        return quantization_label(self.spec.quantization)


QUANT_INSTALL_HINT = "pip install 'layerprobe[quant]'   (or: pip install bitsandbytes)"
_BNB_4BIT_TYPE = "nf4"  # the 4-bit type QLoRA-style users run; transformers' own default is fp4


def quantization_label(quantization: str | None) -> str | None:
    """The recorded name of a quantization: `bitsandbytes-4bit-nf4`, `bitsandbytes-8bit`, or None."""
    if quantization == "4bit":
        return f"bitsandbytes-4bit-{_BNB_4BIT_TYPE}"
    if quantization == "8bit":
        return "bitsandbytes-8bit"
    return None


def check_loadable(spec: ModelSpec) -> None:
    """Cheap checks of the loading options, run before the tokenizer, tasks or any weight is read.

    Quantized loading needs bitsandbytes, an optional extra: its absence is one clear error with the
    exact install command, not a traceback after minutes of downloading.
    """
    import importlib.util

    if spec.quantization and importlib.util.find_spec("bitsandbytes") is None:
        flag = "--load-in-4bit" if spec.quantization == "4bit" else "--load-in-8bit"
        raise LayerprobeError(
            f"{flag} needs the bitsandbytes package, which is not installed.", hint=QUANT_INSTALL_HINT
        )


def from_pretrained_kwargs(spec: ModelSpec, dtype: Any, device: Any) -> dict[str, Any]:
    """The keywords every `from_pretrained` of the weights gets: dedicated options, then --model-args.

    Quantized weights cannot be moved after loading (`.to` is refused for bitsandbytes models), so
    without `--device-map` they are placed on the chosen device at load time with `device_map={"": device}`.
    """
    kwargs: dict[str, Any] = {"revision": spec.revision, "trust_remote_code": spec.trust_remote_code, "dtype": dtype}
    if spec.device_map:
        kwargs["device_map"] = spec.device_map
    if spec.attn_implementation:
        kwargs["attn_implementation"] = spec.attn_implementation
    if spec.quantization:
        import transformers as tf

        if spec.quantization == "4bit":
            kwargs["quantization_config"] = tf.BitsAndBytesConfig(
                load_in_4bit=True, bnb_4bit_compute_dtype=dtype, bnb_4bit_quant_type=_BNB_4BIT_TYPE
            )
        else:
            kwargs["quantization_config"] = tf.BitsAndBytesConfig(load_in_8bit=True)
        if not spec.device_map:
            kwargs["device_map"] = {"": str(device)}
    # A copy: accelerate rewrites max_memory in place, and the spec's values are what the result records.
    kwargs.update(copy.deepcopy(spec.model_args))  # ModelSpec refuses keys that duplicate the options above
    return kwargs


def model_kind(config: Any) -> str:
    """Classify a config as causal-lm, encoder or extractive-qa.

    A head named in `architectures` decides (…ForQuestionAnswering, …ForCausalLM); otherwise (a bare
    `LlamaModel`, a classifier) the family decides: a masked-LM family is an encoder, a causal-LM
    family is a decoder. Encoder-decoder models have two stacks and are refused.
    """
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_MASKED_LM_MAPPING_NAMES,
    )

    if getattr(config, "is_encoder_decoder", False):
        raise UnsupportedModel(
            f"{config.model_type} is an encoder-decoder model.",
            hint="layerprobe measures one stack of blocks: decoder LMs or encoders.",
        )
    for arch in getattr(config, "architectures", None) or []:
        if arch.endswith("ForQuestionAnswering"):
            return EXTRACTIVE_QA
        if arch.endswith(("ForCausalLM", "LMHeadModel", "ForConditionalGeneration")):
            return CAUSAL_LM
    model_type = getattr(config, "model_type", "")
    if model_type in MODEL_FOR_MASKED_LM_MAPPING_NAMES and not getattr(config, "is_decoder", False):
        return ENCODER
    if model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        return CAUSAL_LM
    return ENCODER


def resolve_device(name: str):
    """Turn `auto` into the best available accelerator."""
    import torch

    if name != "auto":
        if name.startswith("cuda") and not torch.cuda.is_available():
            raise LayerprobeError(
                f"--device {name} asked for, but no CUDA GPU is available.", hint="Use --device cpu (or auto)."
            )
        if name == "mps" and not torch.backends.mps.is_available():
            raise LayerprobeError("--device mps asked for, but MPS is not available.", hint="Use --device cpu.")
        return torch.device(name)
    if torch.cuda.is_available():
        return torch.device("cuda")
    if torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def resolve_dtype(name: str, config: Any, device) -> Any:
    """`auto` keeps the checkpoint's half precision on a GPU, and uses float32 on a CPU.

    Half-precision matmuls on CPU are slow or unsupported, so CPU runs upcast; on an accelerator the
    checkpoint's own dtype is what its users run.
    """
    import torch

    if name != "auto":
        return getattr(torch, name)
    stored = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)
    if isinstance(stored, str):
        stored = getattr(torch, stored, None)
    if device is not None and device.type == "cuda" and stored in (torch.bfloat16, torch.float16):
        return stored
    if device is None and torch.cuda.is_available() and stored in (torch.bfloat16, torch.float16):
        return stored  # device_map=auto over GPUs
    return torch.float32


def translate_load_error(exc: Exception, spec: ModelSpec) -> LayerprobeError:
    """Map the many ways hub/transformers loading fails onto one clear message."""
    text = f"{type(exc).__name__}: {exc}"
    chain = [exc, exc.__cause__, exc.__context__]
    names = {type(e).__name__ for e in chain if e is not None}
    where = f"{spec.model!r}" + (f" at revision {spec.revision!r}" if spec.revision else "")
    if "GatedRepoError" in names or "gated repo" in text.lower():
        return ModelNotFound(
            f"{where} is a gated model and this machine has no access to it.",
            hint="Accept its licence on huggingface.co and run `hf auth login` (or set HF_TOKEN).",
        )
    if "trust_remote_code" in text:
        return ModelNotFound(
            f"{where} needs its own modelling code to load.",
            hint="Re-run with --trust-remote-code if you trust that repository.",
        )
    if "RevisionNotFoundError" in names or "is not a valid git identifier" in text:
        return ModelNotFound(
            f"Revision {spec.revision!r} does not exist for {spec.model!r}.",
            hint="Pass a branch, tag or commit hash that exists.",
        )
    if (
        any(n in names for n in ("LocalEntryNotFoundError", "OfflineModeIsEnabled"))
        or "couldn't connect" in text.lower()
        or "offline" in text.lower()
    ):
        return _unreachable(where, spec.model)
    if "Unrecognized" in text or "does not recognize this architecture" in text:
        return UnsupportedModel(
            f"transformers cannot build {where}: {str(exc).splitlines()[0]}",
            hint="Upgrade transformers, or pass --trust-remote-code for custom models.",
        )
    return ModelNotFound(
        f"Cannot load {where}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}",
        hint="Check the hub id (org/name) or the local directory path.",
    )


def _unreachable(where: str, model: str) -> ModelNotFound:
    """One line for "not cached and the Hub cannot be reached", saying whether offline mode is on."""
    if hub_offline():
        return ModelNotFound(
            f"{where} is not in the local Hugging Face cache and the Hub cannot be reached: offline mode is set "
            "(HF_HUB_OFFLINE=1).",
            hint=offline_model_hint(model),
        )
    return ModelNotFound(
        f"{where} is not in the local Hugging Face cache and the Hugging Face Hub cannot be reached.",
        hint=offline_model_hint(model),
    )


@contextlib.contextmanager
def quiet_hub_logs():
    """Silence huggingface_hub's and datasets' warnings while the Hub is asked for files.

    An unreachable Hub logs a dozen retry lines that would interleave with the progress bar; the failure
    itself becomes one LayerprobeError.
    """
    loggers = [logging.getLogger(name) for name in ("huggingface_hub", "datasets")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


@contextlib.contextmanager
def quiet_transformers():
    """Silence transformers' load reports and tqdm bars; layerprobe shows its own progress."""
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        with quiet_hub_logs():
            yield
    finally:
        hf_logging.set_verbosity(level)
        if bars:
            hf_logging.enable_progress_bar()


def load_config(spec: ModelSpec) -> Any:
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


def load_skeleton(spec: ModelSpec) -> tuple[Any, str, str]:
    """The base model built from its config on the meta device: structure and sizes, no weights, no memory.

    Returns (model, architecture, kind).
    """
    config = load_config(spec)
    kind = model_kind(config)
    model = skeleton_from_config(config, spec)
    architecture = (getattr(config, "architectures", None) or [type(model).__name__])[0]
    return model, architecture, kind


def skeleton_stack(spec: ModelSpec) -> Any:
    """The block stack `--layers-path` names, found on a weightless skeleton (None without --layers-path).

    A wrong path is then reported before any weight is read; without the option the stack is found
    after loading, as before (layers.find_layers' search needs no check).
    """
    if not spec.layers_path:
        return None

    skeleton, _, _ = load_skeleton(spec)
    return find_layers(skeleton, spec.layers_path)


def load_tokenizer(spec: ModelSpec) -> Any:
    """Only the tokenizer: cheap, so the corpus can be tokenized (and found too small) before any weight."""
    import transformers as tf

    with quiet_transformers():
        try:
            return tf.AutoTokenizer.from_pretrained(
                spec.model, revision=spec.revision, trust_remote_code=spec.trust_remote_code
            )
        except (OSError, ValueError, KeyError) as exc:
            raise translate_load_error(exc, spec) from exc


def skeleton_from_config(config: Any, spec: ModelSpec) -> Any:
    """The base model of `config` on the meta device (the config is copied: building may annotate it)."""
    import copy

    import transformers as tf
    from accelerate import init_empty_weights

    config = copy.deepcopy(config)
    with quiet_transformers(), init_empty_weights():
        try:
            model = tf.AutoModel.from_config(config, trust_remote_code=spec.trust_remote_code)
        except ValueError:  # a family registered for causal LM only
            model = base_of(tf.AutoModelForCausalLM.from_config(config, trust_remote_code=spec.trust_remote_code))
    return model


def check_before_loading(spec: ModelSpec, config: Any) -> None:
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


def check_skeleton_weights(spec: ModelSpec, skeleton: Any, stack: Any) -> None:
    """The checkpoint's weight files against the skeleton's block stack (names, depth, shapes)."""
    quantized = getattr(skeleton.config, "quantization_config", None) is not None
    check_files(spec, skeleton, stack.path, stack.num_layers, quantized)


def check_tokenizer_for_harness(tokenizer: Any, spec: ModelSpec) -> None:
    """lm-eval starts texts with an empty context from the BOS (or EOS) token; without either it crashes."""
    if getattr(tokenizer, "bos_token_id", None) is None and getattr(tokenizer, "eos_token_id", None) is None:
        raise LayerprobeError(
            f"The tokenizer of {spec.model} defines neither an end-of-sequence nor a beginning-of-sequence token, "
            "which lm-eval needs to score a continuation with an empty context.",
            hint='Set "eos_token" (or "bos_token") in its tokenizer_config.json (or tokenizer.add_special_tokens '
            "and save_pretrained), then re-run.",
        )


def load_model(spec: ModelSpec, purpose: str = "base", lm_eval: bool = False, tokenizer: Any = None) -> LoadedModel:
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
    if tokenizer is None:
        tokenizer = load_tokenizer(spec)
    with quiet_transformers():
        if lm_eval and purpose == CAUSAL_LM:
            check_tokenizer_for_harness(tokenizer, spec)
        check_before_loading(spec, config)
        device = None if spec.device_map else resolve_device(spec.device)
        dtype = resolve_dtype(spec.dtype, config, device)
        model_class = {
            "base": tf.AutoModel,
            CAUSAL_LM: tf.AutoModelForCausalLM,
            EXTRACTIVE_QA: tf.AutoModelForQuestionAnswering,
            MASKED_LM: tf.AutoModelForMaskedLM,
        }[purpose]
        kwargs = from_pretrained_kwargs(spec, dtype, device)
        try:
            model, info = model_class.from_pretrained(spec.model, config=config, output_loading_info=True, **kwargs)
        except ValueError as exc:
            if purpose == "base" and "Unrecognized configuration class" in str(exc):
                model, info = tf.AutoModelForCausalLM.from_pretrained(
                    spec.model, config=config, output_loading_info=True, **kwargs
                )
                model = base_of(model)
            else:
                raise translate_load_error(exc, spec) from exc
        except (OSError, KeyError) as exc:
            raise translate_load_error(exc, spec) from exc
        except Exception as exc:
            translated = _loading_option_error(exc, spec) or translate_weights_error(exc, spec)
            if translated is None:
                raise
            raise translated from exc
    stack = find_layers(model, spec.layers_path)
    check_loading_info(spec.model, model, info, stack.path, base_of(model))
    if purpose != "base":
        _refuse_untrained_head(model, info, spec)
    if device is not None and not spec.quantization:
        model.to(device)
    model.eval()
    embeddings = model.get_input_embeddings()
    input_device = module_device(embeddings) if embeddings is not None else device  # offloaded: the hook's
    return LoadedModel(
        model=model,
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


def _loading_option_error(exc: Exception, spec: ModelSpec) -> LayerprobeError | None:
    """A --model-args key the model does not take, or a missing extra (bitsandbytes): one clear line."""
    if isinstance(exc, TypeError) and spec.model_args and "keyword argument" in str(exc):
        return LayerprobeError(
            f"Cannot load {spec.model!r} with these loading options: {str(exc).splitlines()[0]}",
            hint="Check the keys of --model-args (they go to from_pretrained).",
        )
    if isinstance(exc, ImportError) and spec.quantization:
        return LayerprobeError(
            f"Cannot load {spec.model!r} quantized: {str(exc).splitlines()[0]}", hint=QUANT_INSTALL_HINT
        )
    return None


def _refuse_untrained_head(model: Any, info: dict, spec: ModelSpec) -> None:
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


# Families whose position ids start at pad_token_id + 1: the first pad_token_id + 1 embeddings are unusable.
_OFFSET_POSITIONS = {
    "roberta",
    "xlm-roberta",
    "xlm-roberta-xl",
    "camembert",
    "roberta-prelayernorm",
    "data2vec-text",
    "longformer",
    "ibert",
    "xmod",
    "bart",
    "mbart",
}


def context_length(config: Any, tokenizer: Any = None) -> int | None:
    """The longest sequence the model's position scheme (and its tokenizer, if it says) supports."""
    limits = []
    for name in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            if getattr(config, "model_type", "") in _OFFSET_POSITIONS:
                value -= (getattr(config, "pad_token_id", None) or 0) + 1
            limits.append(value)
            break
    declared = getattr(tokenizer, "model_max_length", None)
    if isinstance(declared, int) and 0 < declared < 1_000_000:  # transformers' "no limit" is ~1e30
        limits.append(declared)
    return min(limits) if limits else None


def module_device(module: Any) -> Any:
    """Where a module computes: accelerate's execution device if it dispatches it, else its weights' device.

    Under `--device-map` a block's weights may live on "meta" (offloaded to CPU or disk and brought in by
    accelerate's AlignDevicesHook at each call), so the hook, not the parameter, says where inputs must be.
    Returns None for a module with neither (no weights, no hook).
    """
    import torch

    for sub in module.modules():
        hook = getattr(sub, "_hf_hook", None)
        for candidate in getattr(hook, "hooks", None) or [hook]:  # a SequentialHook wraps several
            device = getattr(candidate, "execution_device", None)
            if device is not None:
                return torch.device(device) if not isinstance(device, int) else torch.device("cuda", device)
    for parameter in module.parameters():
        if parameter.device.type != "meta":
            return parameter.device
    return None


def takes_argument(module: Any, name: str) -> bool:
    """Whether `module.forward` names `name` (models differ on use_cache, token_type_ids, ...)."""
    return name in inspect.signature(module.forward).parameters
