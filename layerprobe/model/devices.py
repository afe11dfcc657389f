"""Where a model computes and in which precision: `--device` and `--dtype` resolved, a module's device found.

`auto` picks the best accelerator there is, and keeps a checkpoint's half precision only where half precision
is fast (a GPU). Under `--device-map` a block's weights may be offloaded, so accelerate's hooks, not the
weights, say where its inputs must go.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from layerprobe.core import LayerprobeError

if TYPE_CHECKING:
    import torch
    from torch import nn
    from transformers import PretrainedConfig


def resolve_device(name: str) -> torch.device:
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


def gpu_count() -> int:
    """How many GPUs accelerate's integer device keys (`max_memory={0:...}`) can name here: CUDA's, else XPU's."""
    import torch

    if torch.cuda.is_available():
        return torch.cuda.device_count()
    xpu = getattr(torch, "xpu", None)
    if xpu is not None and xpu.is_available():
        return int(xpu.device_count())
    return 0


def resolve_dtype(name: str, config: PretrainedConfig, device: torch.device | None) -> torch.dtype:
    """`auto` keeps the checkpoint's half precision on a GPU, and uses float32 on a CPU.

    Half-precision matmuls on CPU are slow or unsupported, so CPU runs upcast; on an accelerator the
    checkpoint's own dtype is what its users run. `device` None means `--device-map auto`.
    """
    import torch

    if name != "auto":
        chosen: torch.dtype = getattr(torch, name)
        return chosen
    stored = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)
    if isinstance(stored, str):
        stored = getattr(torch, stored, None)
    if device is not None and device.type == "cuda" and stored in (torch.bfloat16, torch.float16):
        return stored
    if device is None and torch.cuda.is_available() and stored in (torch.bfloat16, torch.float16):
        return stored  # device_map=auto over GPUs
    return torch.float32


def module_device(module: nn.Module) -> torch.device | None:
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
