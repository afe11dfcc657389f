"""What to load: --model-args read like lm-eval's (with mappings), each setting with one home, and the
device map and attention implementation checked."""

from __future__ import annotations

import pytest

from layerprobe.core import ModelSpec, parse_model_args
from layerprobe.core.errors import LayerprobeError


def test_model_args_parse_like_lm_eval_with_mappings():
    parsed = parse_model_args(
        "low_cpu_mem_usage=true,use_safetensors=False,x=3,y=0.5,z=none,name=sdpa,"
        'max_memory={0:20GiB,1:"20GiB",cpu:60GiB},q="quoted"'
    )
    assert parsed == {
        "low_cpu_mem_usage": True,
        "use_safetensors": False,
        "x": 3,
        "y": 0.5,
        "z": None,
        "name": "sdpa",
        "max_memory": {0: "20GiB", 1: "20GiB", "cpu": "60GiB"},
        "q": "quoted",
    }
    assert isinstance(parsed["x"], int) and isinstance(parsed["y"], float)
    assert parse_model_args(None) == {} and parse_model_args("  ") == {}


@pytest.mark.parametrize(
    "text, needle",
    [("novalue", "Cannot read"), ("a=1,a=2", "twice"), ("m={0:1", "Unbalanced"), ("m=0:1}", "Unbalanced")],
)
def test_model_args_mistakes_are_clear_errors(text, needle):
    with pytest.raises(LayerprobeError, match=needle):
        parse_model_args(text)


@pytest.mark.parametrize("key", ["dtype", "torch_dtype", "device_map", "revision", "trust_remote_code", "device"])
def test_model_args_that_duplicate_an_option_are_refused(key):
    with pytest.raises(LayerprobeError, match=key):
        ModelSpec("m", model_args={key: "x"})


def test_attn_implementation_has_one_home():
    spec = ModelSpec("m", model_args={"attn_implementation": "eager", "low_cpu_mem_usage": True})
    assert spec.attn_implementation == "eager" and spec.model_args == {"low_cpu_mem_usage": True}
    with pytest.raises(LayerprobeError, match="given twice"):
        ModelSpec("m", model_args={"attn_implementation": "eager"}, attn_implementation="sdpa")
    with pytest.raises(LayerprobeError, match="attn-implementation"):
        ModelSpec("m", attn_implementation="fast_please")


def test_model_spec_validation():
    with pytest.raises(LayerprobeError, match="--device-map"):
        ModelSpec("m", device_map="balanced")
    assert ModelSpec("m", device="cuda:1").device == "cuda:1"
