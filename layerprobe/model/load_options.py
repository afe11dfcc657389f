"""The loading options as transformers takes them, and their mistakes as one line each.

Quantized loading needs bitsandbytes, an optional extra: its absence is one clear error with the exact
install command, raised before the tokenizer, the tasks or any weight is read, not a traceback after minutes
of downloading. The same goes for a `--model-args` key the model does not take.
"""

from __future__ import annotations

import copy
import importlib.util
from typing import TYPE_CHECKING, Any

from layerprobe.core import LayerprobeError, ModelSpec

if TYPE_CHECKING:
    import torch

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
    """Cheap checks of the loading options, run before the tokenizer, tasks or any weight is read."""
    if spec.quantization and importlib.util.find_spec("bitsandbytes") is None:
        flag = "--load-in-4bit" if spec.quantization == "4bit" else "--load-in-8bit"
        raise LayerprobeError(
            f"{flag} needs the bitsandbytes package, which is not installed.", hint=QUANT_INSTALL_HINT
        )


def from_pretrained_kwargs(spec: ModelSpec, dtype: torch.dtype, device: torch.device | None) -> dict[str, Any]:
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


def loading_option_error(exc: Exception, spec: ModelSpec) -> LayerprobeError | None:
    """A --model-args key the model does not take, or a missing extra (bitsandbytes): one clear line, else None."""
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
