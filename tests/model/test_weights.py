"""The weights are checked against config.json before loading: a checkpoint whose config describes
other blocks than its files hold is refused before any weight is read, or by transformers' loading report."""

from __future__ import annotations

import json
import shutil

import huggingface_hub.constants as hub_constants
import pytest
import torch
import transformers as tf
from factories import copy_with_config, copy_without_weight, pickled_checkpoint
from safetensors.torch import load_file, save_file
from typer.testing import CliRunner

from layerprobe.cli.app import app
from layerprobe.core import ModelSpec
from layerprobe.core.errors import LayerprobeError
from layerprobe.model import load_model
from layerprobe.model.weights import WeightsMismatch, checkpoint_shapes


def _no_header_check(monkeypatch):
    """Files the pre-check cannot see (a hub model not cached yet): only the after-load net remains."""
    monkeypatch.setattr("layerprobe.model.weights.checkpoint_shapes", lambda _spec: {})


@pytest.mark.parametrize(
    ("arch", "purpose", "layers", "expected"),
    [
        ("llama", "base", 6, r"describes 6 blocks.*hold 4 block\(s\) \(0-3\).*4, 5 would be randomly initialised"),
        ("llama", "head", 6, r"4, 5 would be randomly initialised.*missing: layers\.4\."),
        ("llama", "head", 2, r"2, 3 would be dropped and a truncated model.*unexpected: model\.layers\.2\."),
        ("gpt2", "base", 2, r"2, 3 would be dropped"),
        ("bert_qa", "head", 6, r"encoder.layer.*4, 5 would be randomly initialised"),
    ],
)
def test_config_that_disagrees_with_the_weights_is_refused_before_loading(
    tiny_checkpoints, tmp_path, arch, purpose, layers, expected, forbid_weight_loading
):
    key = "n_layer" if arch == "gpt2" else "num_hidden_layers"
    path = copy_with_config(tiny_checkpoints[arch], tmp_path / "ckpt", **{key: layers})
    forbid_weight_loading()
    with pytest.raises(WeightsMismatch, match=expected) as info:
        load_model(ModelSpec(str(path), device="cpu"), purpose=purpose)
    assert "num_hidden_layers" in info.value.hint and "\n" not in info.value.message


@pytest.mark.parametrize(("layers", "word"), [(6, "missing"), (2, "but not in the model")])
@pytest.mark.parametrize("purpose", ["base", "head"])
def test_loading_info_catches_what_the_headers_could_not_show(
    tiny_checkpoints, tmp_path, monkeypatch, layers, word, purpose
):
    path = copy_with_config(tiny_checkpoints["llama"], tmp_path / "ckpt", num_hidden_layers=layers)
    _no_header_check(monkeypatch)
    with pytest.raises(WeightsMismatch, match=rf"{word}.*layers\.[2-5]\."):
        load_model(ModelSpec(str(path), device="cpu"), purpose=purpose)


def test_a_block_missing_one_weight_is_refused(tiny_checkpoints, tmp_path):
    """Every block index is present, so only transformers' own missing-keys list can show the hole."""
    path = copy_without_weight(tiny_checkpoints["llama"], tmp_path / "ckpt", "model.layers.2.mlp.up_proj.weight")
    with pytest.raises(WeightsMismatch, match=r"missing.*layers\.2\.mlp\.up_proj\.weight"):
        load_model(ModelSpec(str(path), device="cpu"))


def test_sharded_and_bin_checkpoints_are_checked_and_pass_when_they_agree(
    tiny_checkpoints, tmp_path, forbid_weight_loading
):
    model = tf.AutoModelForCausalLM.from_pretrained(tiny_checkpoints["llama"])
    tokenizer = tf.AutoTokenizer.from_pretrained(tiny_checkpoints["llama"])
    sharded, legacy = tmp_path / "sharded", tmp_path / "legacy"
    model.save_pretrained(sharded, max_shard_size="100KB")
    assert (sharded / "model.safetensors.index.json").exists()
    legacy.mkdir()
    model.config.save_pretrained(legacy)
    torch.save(model.state_dict(), legacy / "pytorch_model.bin")
    for path in (sharded, legacy):
        tokenizer.save_pretrained(path)
        shapes = checkpoint_shapes(ModelSpec(str(path)))
        assert shapes["model.layers.3.mlp.up_proj.weight"] == (96, 48) and len(shapes) == len(model.state_dict())
        assert load_model(ModelSpec(str(path), device="cpu"), purpose="head").model.config.num_hidden_layers == 4
        config = path / "config.json"
        config.write_text(config.read_text().replace('"num_hidden_layers": 4', '"num_hidden_layers": 5'))
    forbid_weight_loading()
    for path in (sharded, legacy):
        with pytest.raises(WeightsMismatch, match="block\\(s\\) 4 would be randomly initialised"):
            load_model(ModelSpec(str(path), device="cpu"))


@pytest.mark.parametrize("pre_check", [True, False])
def test_weights_of_the_wrong_shape_are_one_line(
    tiny_checkpoints, tmp_path, monkeypatch, pre_check, forbid_weight_loading
):
    path = copy_with_config(tiny_checkpoints["llama"], tmp_path / "ckpt", intermediate_size=80)
    if pre_check:
        forbid_weight_loading()
    else:
        _no_header_check(monkeypatch)
    with pytest.raises(WeightsMismatch, match="shape that config.json does not describe") as info:
        load_model(ModelSpec(str(path), device="cpu"))
    if pre_check:
        assert "mlp.gate_proj.weight is [96, 48] in the checkpoint but [80, 48]" in info.value.message


@pytest.mark.parametrize("pre_check", [True, False])
def test_an_unsafe_pickle_is_refused_with_how_to_convert_it(tiny_checkpoints, tmp_path, monkeypatch, pre_check):
    path = pickled_checkpoint(tiny_checkpoints["llama"], tmp_path / "ckpt")
    if not pre_check:
        _no_header_check(monkeypatch)
    with pytest.raises(LayerprobeError, match="refused for safety") as info:
        load_model(ModelSpec(str(path), device="cpu"))
    assert "safe_serialization=True" in info.value.hint


def test_a_corrupt_safetensors_header_is_one_red_line_exit_2(tiny_checkpoints, tmp_path):
    path = tmp_path / "ckpt"
    shutil.copytree(tiny_checkpoints["llama"], path)
    (path / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all}")
    result = CliRunner().invoke(
        app, ["angular", str(path), "--dataset", "builtin:pydoc", "--tokens", "256", "--out", str(tmp_path / "o")]
    )  # a corpus big enough for --tokens: the corpus is checked (cheaply) before the weight files' headers
    assert result.exit_code == 2, result.output
    assert "not a valid safetensors file" in result.output and "Traceback" not in result.output
    assert "download it again" in result.output
    assert not (tmp_path / "o" / "angular.json").exists()


def test_weights_transformers_drops_on_purpose_are_not_a_mismatch(tiny_checkpoints, tmp_path):
    """DeepSeek-V3 checkpoints hold a multi-token-prediction module as block L (and 61 in the full model):
    declared by the config (num_nextn_predict_layers) or ignored by transformers, so never a mismatch."""

    path = tmp_path / "ckpt"
    shutil.copytree(tiny_checkpoints["deepseek_v3"], path)
    state = load_file(path / "model.safetensors")
    state["model.layers.61.eh_proj.weight"] = torch.zeros(4, 4)  # transformers' own ignore pattern
    state["model.layers.4.eh_proj.weight"] = torch.zeros(4, 4)  # the MTP block right after the stack
    save_file(state, path / "model.safetensors", metadata={"format": "pt"})
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**config, "num_nextn_predict_layers": 0}))
    with pytest.raises(WeightsMismatch, match=r"block\(s\) 4 would be dropped"):
        load_model(ModelSpec(str(path), device="cpu"))
    (path / "config.json").write_text(json.dumps({**config, "num_nextn_predict_layers": 1}))
    for purpose in ("base", "head"):
        assert load_model(ModelSpec(str(path), device="cpu"), purpose=purpose).model.config.num_hidden_layers == 4


def test_a_cached_hub_checkpoint_is_checked_from_its_cached_files(tiny_checkpoints, tmp_path, monkeypatch):
    """A hub id is checked before loading when its files are in the local cache (nothing is downloaded)."""

    repo = tmp_path / "hub" / "models--org--tiny"
    snapshot = repo / "snapshots" / ("0" * 40)
    shutil.copytree(tiny_checkpoints["llama"], snapshot)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0" * 40)
    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    shapes = checkpoint_shapes(ModelSpec("org/tiny"))
    assert shapes["model.layers.3.mlp.up_proj.weight"] == (96, 48)
    assert checkpoint_shapes(ModelSpec("org/not-cached")) == {}
