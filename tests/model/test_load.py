"""Loading a checkpoint: the head its purpose needs, its dtype, refusals that must come before the weights."""

from __future__ import annotations

import pytest
import torch
import transformers as tf
from factories import byte_level_tokenizer, copy_with_bare_tokenizer, small_config

from layerprobe.core import ModelSpec
from layerprobe.core.errors import LayerprobeError, UnsupportedModel
from layerprobe.model import CAUSAL_LM, EXTRACTIVE_QA, load_model


@pytest.mark.parametrize(("purpose", "expected"), [("base", "LlamaModel"), ("head", "LlamaForCausalLM")])
def test_load_purpose_picks_the_head(tiny_checkpoints, purpose, expected):
    loaded = load_model(ModelSpec(str(tiny_checkpoints["llama"]), device="cpu"), purpose=purpose)
    assert type(loaded.model).__name__ == expected
    assert loaded.kind == CAUSAL_LM and loaded.architecture == "LlamaForCausalLM" and loaded.dtype == "float32"
    assert not loaded.model.training and loaded.context_length == 256


def test_qa_checkpoint_loads_its_head(tiny_checkpoints):
    loaded = load_model(ModelSpec(str(tiny_checkpoints["bert_qa"]), device="cpu"), purpose="head")
    assert type(loaded.model).__name__ == "BertForQuestionAnswering" and loaded.kind == EXTRACTIVE_QA


def test_explicit_dtype(tiny_checkpoints):
    loaded = load_model(ModelSpec(str(tiny_checkpoints["gpt2"]), dtype="bfloat16", device="cpu"))
    assert next(loaded.model.parameters()).dtype == torch.bfloat16 and loaded.dtype == "bfloat16"


def test_a_head_missing_from_the_checkpoint_is_refused(tiny_checkpoints, tmp_path):
    """A bare LlamaModel loaded for prune-drop would get a random LM head: its scores would mean nothing."""
    base = tf.AutoModel.from_pretrained(tiny_checkpoints["llama"])
    base.config.architectures = ["LlamaModel"]
    base.save_pretrained(tmp_path)
    tf.AutoTokenizer.from_pretrained(tiny_checkpoints["llama"]).save_pretrained(tmp_path)
    assert load_model(ModelSpec(str(tmp_path), device="cpu")).kind == CAUSAL_LM  # angular is fine
    with pytest.raises(UnsupportedModel, match="no trained LlamaForCausalLM head"):
        load_model(ModelSpec(str(tmp_path), device="cpu"), purpose="head")


def test_a_tokenizer_without_eos_or_bos_is_refused_for_lm_eval_before_loading(
    tiny_checkpoints, tmp_path, forbid_weight_loading
):
    path = copy_with_bare_tokenizer(tiny_checkpoints["llama"], tmp_path / "ckpt")
    assert tf.AutoTokenizer.from_pretrained(path).eos_token_id is None
    assert load_model(ModelSpec(str(path), device="cpu")).kind == CAUSAL_LM  # angular needs no special token
    assert load_model(ModelSpec(str(path), device="cpu"), purpose="head").kind == CAUSAL_LM  # nor depth --grad
    forbid_weight_loading()
    with pytest.raises(LayerprobeError, match="neither an end-of-sequence nor a beginning-of-sequence") as info:
        load_model(ModelSpec(str(path), device="cpu"), purpose="head", lm_eval=True)
    assert "eos_token" in info.value.hint


def test_albert_is_refused_before_loading_without_a_path_that_cannot_work(tmp_path, forbid_weight_loading):
    byte_level_tokenizer(add_bos=False).save_pretrained(tmp_path)
    config = small_config("albert", num_layers=3, vocab_size=512, architectures=["AlbertModel"])
    tf.AlbertModel(config).save_pretrained(tmp_path)
    forbid_weight_loading()
    for layers_path in (None, "encoder.albert_layer_groups"):
        with pytest.raises(UnsupportedModel, match="shares weights across its depth.*applied 3 times") as info:
            load_model(ModelSpec(str(tmp_path), device="cpu", layers_path=layers_path))
        assert "--layers-path" not in info.value.hint.replace("no --layers-path", "")
