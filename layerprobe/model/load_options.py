"""The loading options as transformers takes them, and their mistakes as one line each.

Quantized loading needs bitsandbytes, an optional extra: its absence is one clear error with the exact
install command, raised before the tokenizer, the tasks or any weight is read, not a traceback after minutes
of downloading. The same goes for a `--model-args` key the model does not take.
"""

from __future__ import annotations

import copy
import importlib.util
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from layerprobe.core import LayerprobeError, ModelSpec
from layerprobe.model.devices import gpu_count

if TYPE_CHECKING:
    import torch

QUANT_INSTALL_HINT = "pip install 'layerprobe[quant]'   (or: pip install bitsandbytes)"
_BNB_4BIT_TYPE = "nf4"  # the 4-bit type QLoRA-style users run; transformers' own default is fp4
_MEMORY_PLACES = ("cpu", "mps", "disk")  # max_memory's keys besides GPU indexes, as accelerate names them
_MEMORY_EXAMPLE = "max_memory={0:20GiB,cpu:60GiB}"


def quantization_label(quantization: str | None) -> str | None:
    """The recorded name of a quantization: `bitsandbytes-4bit-nf4`, `bitsandbytes-8bit`, or None."""
    if quantization == "4bit":
        return f"bitsandbytes-4bit-{_BNB_4BIT_TYPE}"
    if quantization == "8bit":
        return "bitsandbytes-8bit"
    return None


def check_loadable(spec: ModelSpec, note: Callable[[str], None] | None = None) -> None:
    """Cheap checks of the loading options, run before the tokenizer, tasks or any weight is read.

    `note` hears one line per budget of `max_memory` that this machine cannot use (a GPU it lacks).
    """
    if spec.quantization and importlib.util.find_spec("bitsandbytes") is None:
        flag = "--load-in-4bit" if spec.quantization == "4bit" else "--load-in-8bit"
        raise LayerprobeError(
            f"{flag} needs the bitsandbytes package, which is not installed.", hint=QUANT_INSTALL_HINT
        )
    if "max_memory" in spec.model_args:
        check_max_memory(spec.model_args["max_memory"], spec.device_map)
        absent = absent_gpus(spec.model_args["max_memory"])
        if absent and note is not None:
            note(_absent_gpus_note(absent, spec.model_args["max_memory"]))


def check_max_memory(budget: object, device_map: str | None) -> None:
    """`--model-args max_memory` read as accelerate reads it: GPU index, cpu, mps or disk → a size.

    Without `--device-map` transformers ignores max_memory, so the whole model would go to one device
    whatever budget was given: refused, like every key or size accelerate would fail on mid-load.
    """
    if not device_map:
        raise LayerprobeError(
            "--model-args max_memory only bounds a model spread by --device-map auto; without it the whole "
            "model goes to one device.",
            hint="Add --device-map auto, or leave max_memory out.",
        )
    if not isinstance(budget, dict) or not budget:
        raise LayerprobeError(
            f"--model-args max_memory={budget!r} is not a mapping of devices to sizes.",
            hint=f"Write it in braces, e.g. {_MEMORY_EXAMPLE}.",
        )
    from accelerate.utils import convert_file_size_to_int

    for key, size in budget.items():
        if not (key in _MEMORY_PLACES or (type(key) is int and key >= 0)):
            raise LayerprobeError(
                f"--model-args max_memory names {key!r}, which is not a device accelerate knows.",
                hint=f"Name GPUs by their index (0, 1, ...), or cpu, mps or disk, e.g. {_MEMORY_EXAMPLE}.",
            )
        try:
            if type(size) not in (int, str):
                raise TypeError(size)
            convert_file_size_to_int(size)
        except (TypeError, ValueError):
            raise LayerprobeError(
                f"--model-args max_memory gives {key} the size {size!r}, which is not a size.",
                hint="Write sizes like 20GiB, 512MiB or 4GB (or a number of bytes).",
            ) from None


def absent_gpus(budget: object) -> list[int]:
    """The GPU indexes a `max_memory` mapping names that this machine does not have."""
    if not isinstance(budget, dict):
        return []
    count = gpu_count()
    return sorted(key for key in budget if type(key) is int and key >= count)


def usable_max_memory(budget: dict[Any, Any]) -> dict[Any, Any] | None:
    """`max_memory` without the GPUs this machine lacks; None when nothing is left (accelerate then uses all).

    accelerate only warns about a GPU it cannot find and places blocks on it anyway, so transformers fails
    mid-load; without those entries the model is spread over what the machine has.
    """
    absent = absent_gpus(budget)
    kept = {key: size for key, size in budget.items() if key not in absent}
    return kept or None


def _absent_gpus_note(absent: list[int], budget: dict[Any, Any]) -> str:
    """The line that says which budgets were left out, and where the model goes instead."""
    count = gpu_count()
    have = "no GPU" if count == 0 else f"{count} GPU{'s' if count > 1 else ''} (0-{count - 1})"
    named = ", ".join(str(gpu) for gpu in absent)
    rest = usable_max_memory(budget)
    where = ", ".join(str(key) for key in rest) if rest else "all the memory it has"
    return (
        f"--model-args max_memory names GPU {named}, which this machine does not have ({have}): "
        f"that budget is left out and the model is spread over {where}."
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
    if isinstance(kwargs.get("max_memory"), dict):
        kwargs["max_memory"] = usable_max_memory(kwargs["max_memory"])
        if kwargs["max_memory"] is None:
            del kwargs["max_memory"]
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
