"""Loading options (--model-args, --attn-implementation, --load-in-4bit/8bit) as they reach from_pretrained.

The options are parsed and refused in tests/core/test_model_spec.py and tests/cli/test_loading_options.py;
a model spread by --device-map is in tests/model/test_devices.py and tests/evaluate/test_shared.py.
"""

from __future__ import annotations

import copy
import json

import torch
import transformers as tf
from command_line import invoke

from layerprobe.core import BUILTIN_CORPUS, CorpusSpec, ModelSpec
from layerprobe.data import build_windows, iter_documents
from layerprobe.measure.angular import measure
from layerprobe.model import load_model
from layerprobe.model.load_options import from_pretrained_kwargs
from layerprobe.model.stack import find_layers


def test_options_reach_from_pretrained_and_the_result(tiny_checkpoints, tmp_path, monkeypatch):
    seen: list[dict] = []
    real_load = tf.PreTrainedModel.from_pretrained.__func__

    def watched(cls, *args, **kwargs):
        seen.append(copy.deepcopy({k: v for k, v in kwargs.items() if k != "config"}))
        return real_load(cls, *args, **kwargs)

    monkeypatch.setattr(tf.PreTrainedModel, "from_pretrained", classmethod(watched))
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
