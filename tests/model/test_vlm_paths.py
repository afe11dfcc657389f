"""`--layers-path` on a vision-language model: written from the model with its head, from the wrapper, or from
the language model, it names the same blocks (docs/cli.md: head-relative paths work)."""

from __future__ import annotations

import transformers as tf
from factories import vlm_config

from layerprobe.model import find_layers, quiet_transformers


def test_a_path_written_from_the_model_with_its_head_is_accepted():
    with quiet_transformers():
        head = tf.AutoModelForImageTextToText.from_config(vlm_config("llava"))
        base = tf.AutoModel.from_config(vlm_config("llava"))
    language_blocks = head.model.language_model.layers
    for path in ("model.language_model.layers", "language_model.layers"):
        assert find_layers(head, path).blocks is language_blocks
        assert find_layers(base, path).blocks is base.language_model.layers
    # the default search finds the same stack, never the vision tower's
    assert find_layers(head).blocks is language_blocks
