"""Where a model computes: the dtype `auto` picks, a GPU asked for without one, blocks spread by --device-map.

The device_map test runs on CPU: `--model-args max_memory={cpu:...},offload_folder=...` makes accelerate
keep some blocks' weights on disk and attach its AlignDevicesHook to every block, which is the code path a
70B model spread over GPUs takes (weights where the hook says, inputs moved at each call).
"""

from __future__ import annotations

import pytest
import torch
import transformers as tf
from factories import offload_args

from layerprobe.core import ModelSpec, parse_model_args
from layerprobe.core.errors import LayerprobeError
from layerprobe.model import load_model, module_device
from layerprobe.model.devices import resolve_dtype
from layerprobe.model.stack import find_layers


def test_auto_dtype_is_float32_on_cpu_and_checkpoint_half_on_gpu():
    config = tf.LlamaConfig(dtype="bfloat16")
    assert resolve_dtype("auto", config, torch.device("cpu")) == torch.float32
    assert resolve_dtype("auto", config, torch.device("cuda")) == torch.bfloat16
    assert resolve_dtype("float16", config, torch.device("cpu")) == torch.float16


def test_cuda_asked_for_without_a_gpu(tiny_checkpoints):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(LayerprobeError, match="no CUDA GPU"):
        load_model(ModelSpec(str(tiny_checkpoints["gpt2"]), device="cuda"))


def test_offloaded_model_has_hooks_and_devices(tiny_checkpoints, tmp_path):
    spec = ModelSpec(
        str(tiny_checkpoints["llama"]),
        device_map="auto",
        dtype="float32",
        model_args=parse_model_args(offload_args(tmp_path)),
    )
    loaded = load_model(spec, purpose="head")
    blocks = find_layers(loaded.model).blocks
    placed = loaded.model.hf_device_map
    assert "disk" in placed.values() and "cpu" in placed.values()  # really split: some weights not in memory
    assert all(type(getattr(b, "_hf_hook", None)).__name__ == "AlignDevicesHook" for b in blocks)
    offloaded = [b for b in blocks if next(b.parameters()).device.type == "meta"]
    assert offloaded  # weights on meta, brought in by the hook at each call
    assert all(module_device(b) == torch.device("cpu") for b in blocks)  # where they compute, not "meta"
    assert loaded.input_device == torch.device("cpu")
    assert spec.model_args["max_memory"] == {"cpu": "400KB"}  # accelerate rewrites its copy, not the spec's
