"""The loading table: which auto class loads a checkpoint for a purpose, read from its model type."""

from __future__ import annotations

import pytest
import transformers as tf
from factories import VLM_FAMILIES, small_config, vlm_config

from layerprobe.core.errors import UnsupportedModel
from layerprobe.model import CAUSAL_LM, EXTRACTIVE_QA, head_class, loader_for


@pytest.mark.parametrize("family", VLM_FAMILIES)
def test_a_vlm_scores_text_through_its_image_text_to_text_class(family):
    assert head_class(vlm_config(family), CAUSAL_LM) is tf.AutoModelForImageTextToText


def test_a_causal_lm_keeps_its_causal_lm_class_and_a_vlm_known_to_both_too():
    assert head_class(small_config("llama"), CAUSAL_LM) is tf.AutoModelForCausalLM
    assert loader_for(tf.Gemma3Config(), CAUSAL_LM).label == "causal LM"  # known to both: the first wins


def test_a_checkpoint_no_class_of_the_purpose_knows_is_refused_in_one_line():
    with pytest.raises(UnsupportedModel, match="no extractive-qa head") as refused:
        head_class(vlm_config("llava"), EXTRACTIVE_QA)
    assert "\n" not in refused.value.message
