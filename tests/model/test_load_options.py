"""Loading options (--model-args, --attn-implementation, --load-in-4bit/8bit) as they reach from_pretrained.

The options are parsed and refused in tests/core/test_model_spec.py and tests/cli/test_loading_options.py;
a model spread by --device-map is in tests/model/test_devices.py and tests/evaluate/test_shared.py.
"""

from __future__ import annotations

import copy
import json

import pytest
import torch
import transformers as tf
from command_line import invoke

from layerprobe.core import BUILTIN_CORPUS, CorpusSpec, LayerprobeError, ModelSpec, parse_model_args
from layerprobe.data import build_windows, iter_documents
from layerprobe.measure.angular import measure
from layerprobe.model import check_loadable, load_model
from layerprobe.model import load_options as options
from layerprobe.model.load_options import from_pretrained_kwargs
from layerprobe.model.stack import find_layers


def watch_from_pretrained(monkeypatch) -> list[dict]:
    """The keywords of every from_pretrained of weights from now on (copied: accelerate rewrites max_memory)."""
    seen: list[dict] = []
    real_load = tf.PreTrainedModel.from_pretrained.__func__

    def watched(cls, *args, **kwargs):
        seen.append(copy.deepcopy({k: v for k, v in kwargs.items() if k != "config"}))
        return real_load(cls, *args, **kwargs)

    monkeypatch.setattr(tf.PreTrainedModel, "from_pretrained", classmethod(watched))
    return seen


def test_options_reach_from_pretrained_and_the_result(tiny_checkpoints, tmp_path, monkeypatch):
    seen = watch_from_pretrained(monkeypatch)
    out = tmp_path / "out"
    result = invoke(
        "angular", tiny_checkpoints["llama"], "--model-args", "low_cpu_mem_usage=true,use_safetensors=true",
        "--attn-implementation", "eager", "--device", "cpu", "--dataset", BUILTIN_CORPUS, "--tokens", "128",
        "--seq-len", "64", "--quiet", "--out", out,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert len(seen) == 1
    assert seen[0]["low_cpu_mem_usage"] is True and seen[0]["use_safetensors"] is True
    assert seen[0]["attn_implementation"] == "eager"
    assert "quantization_config" not in seen[0]
    model = json.loads((out / "angular.json").read_text())["model"]
    assert model["model_args"] == {"low_cpu_mem_usage": True, "use_safetensors": True}
    assert model["attn_implementation"] == "eager"
    assert model["quantization"] is None


def test_attention_implementations_agree(tiny_checkpoints):
    """eager and sdpa are two kernels of one function: the distances they give must agree."""
    spec = CorpusSpec(BUILTIN_CORPUS, None, "train", "text", 512, 64)
    results = {}
    for attn in ("eager", "sdpa"):
        loaded = load_model(
            ModelSpec(str(tiny_checkpoints["llama"]), device="cpu", attn_implementation=attn), purpose="base"
        )
        assert loaded.attn_implementation == attn
        assert loaded.model.config._attn_implementation == attn
        windows = build_windows(loaded.tokenizer, iter_documents(spec), spec.tokens, spec.seq_len)
        results[attn] = torch.tensor(measure(loaded, find_layers(loaded.model), windows, "all", 4).result())
    torch.testing.assert_close(results["eager"], results["sdpa"], atol=1e-5, rtol=0)


def test_quantized_load_builds_a_bitsandbytes_config():
    """The keywords a quantized load gets (bitsandbytes itself needs a GPU: only the config is checked)."""
    kwargs = from_pretrained_kwargs(ModelSpec("m", quantization="4bit"), torch.bfloat16, torch.device("cpu"))
    config = kwargs["quantization_config"]
    assert config.load_in_4bit and not config.load_in_8bit
    assert config.bnb_4bit_quant_type == "nf4" and config.bnb_4bit_compute_dtype == torch.bfloat16
    assert kwargs["device_map"] == {"": "cpu"}  # bitsandbytes models cannot be moved after loading
    kwargs = from_pretrained_kwargs(ModelSpec("m", quantization="8bit", device_map="auto"), torch.float16, None)
    assert kwargs["quantization_config"].load_in_8bit and kwargs["device_map"] == "auto"


@pytest.mark.parametrize(
    "budget, sent",
    [
        ("{0:1GiB,cpu:1GiB}", {"cpu": "1GiB"}),  # the GPU entry this machine cannot use is left out
        ("{0:1GiB}", None),  # nothing left: accelerate places the model over what there is
    ],
)
def test_max_memory_naming_an_absent_gpu_loads_on_what_there_is(tiny_checkpoints, tmp_path, monkeypatch, budget, sent):
    """A budget copied from a GPU machine: accelerate would place blocks on GPU 0 and fail mid-load."""
    monkeypatch.setattr(options, "gpu_count", lambda: 0)
    seen = watch_from_pretrained(monkeypatch)
    out = tmp_path / "out"
    result = invoke(
        "angular", tiny_checkpoints["llama"], "--device-map", "auto", "--model-args", f"max_memory={budget}",
        "--dataset", BUILTIN_CORPUS, "--tokens", "128", "--seq-len", "64", "--quiet", "--out", out,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    flat_output = " ".join(result.output.split())
    assert "note: --model-args max_memory names GPU 0, which this machine does not have (no GPU)" in flat_output
    assert seen[0]["device_map"] == "auto" and seen[0].get("max_memory") == sent
    recorded = json.loads((out / "angular.json").read_text())["model"]["model_args"]
    assert recorded == json.loads(json.dumps(parse_model_args(f"max_memory={budget}")))  # as typed


def test_usable_max_memory_keeps_the_gpus_there_are(monkeypatch):
    monkeypatch.setattr(options, "gpu_count", lambda: 2)
    budget = {0: "20GiB", 1: "20GiB", 2: "20GiB", 3: "20GiB", "cpu": "60GiB"}
    assert options.absent_gpus(budget) == [2, 3]
    assert options.usable_max_memory(budget) == {0: "20GiB", 1: "20GiB", "cpu": "60GiB"}
    notes: list[str] = []
    check_loadable(ModelSpec("m", device_map="auto", model_args={"max_memory": budget}), notes.append)
    assert notes == [
        "--model-args max_memory names GPU 2, 3, which this machine does not have (2 GPUs (0-1)): "
        "that budget is left out and the model is spread over 0, 1, cpu."
    ]
    notes.clear()
    check_loadable(ModelSpec("m", device_map="auto", model_args={"max_memory": {0: "1GiB"}}), notes.append)
    assert notes == []  # every GPU named is here


@pytest.mark.parametrize(
    "model_args, device_map, needle",
    [
        ("max_memory={cpu:1GiB}", None, "--device-map auto"),  # transformers would ignore it
        ("max_memory=lots", "auto", "not a mapping"),
        ("max_memory=5", "auto", "not a mapping"),
        ("max_memory={}", "auto", "not a mapping"),
        ("max_memory={gpu:1GiB}", "auto", "'gpu', which is not a device"),
        ("max_memory={cuda:0:1GiB}", "auto", "not a device"),
        ("max_memory={-1:1GiB}", "auto", "-1, which is not a device"),
        ("max_memory={cpu:banana}", "auto", "size 'banana', which is not a size"),
        ("max_memory={cpu:1.5}", "auto", "size 1.5, which is not a size"),
        ("max_memory={cpu:-5}", "auto", "size -5, which is not a size"),
        ("max_memory={cpu:true}", "auto", "size True, which is not a size"),
    ],
)
def test_max_memory_accelerate_cannot_use_is_refused_before_loading(model_args, device_map, needle):
    spec = ModelSpec("m", device_map=device_map, model_args=parse_model_args(model_args))
    with pytest.raises(LayerprobeError, match="max_memory") as caught:
        check_loadable(spec)
    assert needle in caught.value.message


@pytest.mark.parametrize("budget", ["20GiB", "512MiB", "4GB", "100KB", 1024, 0])
def test_max_memory_sizes_accelerate_reads_pass(budget, monkeypatch):
    monkeypatch.setattr(options, "gpu_count", lambda: 1)
    check_loadable(ModelSpec("m", device_map="auto", model_args={"max_memory": {0: budget, "disk": budget}}))
