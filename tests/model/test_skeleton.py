"""Norm placement of a weightless skeleton (what `layers` shows without reading the weights)."""

from __future__ import annotations

import pytest
import transformers as tf
from accelerate import init_empty_weights
from factories import small_config

from layerprobe.model.skeleton import placement_without_weights
from layerprobe.model.stack import find_layers

LAYERS = 4


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        (small_config("gemma2", sliding_window=4096), "sandwich"),
        (small_config("gpt_neox"), "parallel"),
        (small_config("bert"), "Post-LN"),
    ],
)
def test_placement_of_a_weightless_skeleton(config, expected):
    with init_empty_weights():
        skeleton = tf.AutoModel.from_config(config)
    stack = find_layers(skeleton)
    assert next(skeleton.parameters()).is_meta
    placement = placement_without_weights(skeleton, stack, config.vocab_size)
    assert placement.labels == [expected] * LAYERS
    assert all(p.is_meta for p in skeleton.parameters())  # nothing stays materialised
