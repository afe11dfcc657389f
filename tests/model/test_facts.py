"""What kind of model a config describes (causal LM, encoder, extractive QA), read from the config alone."""

from __future__ import annotations

import pytest
import transformers as tf

from layerprobe.core.errors import UnsupportedModel
from layerprobe.model import CAUSAL_LM, ENCODER, EXTRACTIVE_QA, SEQ2SEQ, model_kind


@pytest.mark.parametrize(
    ("arch", "kind"),
    [
        ("llama", CAUSAL_LM),
        ("qwen3", CAUSAL_LM),
        ("gpt2", CAUSAL_LM),
        ("deepseek_v3", CAUSAL_LM),
        ("bert", ENCODER),
        ("bert_qa", EXTRACTIVE_QA),
    ],
)
def test_kind_comes_from_the_config(tiny_checkpoints, arch, kind):
    assert model_kind(tf.AutoConfig.from_pretrained(tiny_checkpoints[arch])) == kind


def test_kind_without_architectures():
    assert model_kind(tf.BertConfig()) == ENCODER
    assert model_kind(tf.LlamaConfig()) == CAUSAL_LM
    assert model_kind(tf.T5Config()) == SEQ2SEQ


def test_bare_decoder_is_a_causal_family():
    assert model_kind(tf.LlamaConfig(architectures=["LlamaModel"])) == CAUSAL_LM
    assert model_kind(tf.BertConfig(architectures=["BertForSequenceClassification"])) == ENCODER
    assert model_kind(tf.T5Config(architectures=["T5ForConditionalGeneration"])) == SEQ2SEQ
    with pytest.raises(UnsupportedModel, match="encoder-decoder whose encoder reads audio features"):
        model_kind(tf.WhisperConfig(architectures=["WhisperForConditionalGeneration"]))
