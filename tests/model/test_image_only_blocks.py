"""mllama's image-only blocks: removing a block renumbers `cross_attention_layers` (in memory and exported).

The reference is a model rebuilt in the test from a config written for 3 blocks by hand, the source's weights
copied in by name; a text-only pass of it must give the in-memory removal's logits for every block removed.
"""

from __future__ import annotations

import json

import pytest
import torch
import transformers as tf
from command_line import invoke
from factories.towers import build_tower_checkpoint, mllama_without, tower_model

from layerprobe.model import find_layers, removed_blocks

IDS = torch.tensor([[1, 17, 40, 93, 5, 250, 7, 64, 301, 12, 33, 2]])
CROSS = 2  # the tiny checkpoint's one cross-attention block, of 4 (factories.towers.MLLAMA_CROSS)


def _logits(model) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=IDS, use_cache=False).logits


@pytest.mark.slow
def test_in_memory_removal_renumbers_cross_attention_layers_as_a_rebuilt_model():
    model, _ = tower_model("mllama")
    stack = find_layers(model)
    assert stack.num_layers == 4 and model.config.text_config.cross_attention_layers == [CROSS]
    text_model = model.model.language_model
    for removed in range(4):
        kept = [i for i in range(4) if i != removed]
        with removed_blocks(stack, [removed]):
            assert text_model.cross_attention_layers == [n for n, o in enumerate(kept) if o == CROSS]
            in_memory = _logits(model)
        expected = _logits(mllama_without(model, kept))
        torch.testing.assert_close(in_memory, expected, atol=1e-5, rtol=1e-5, msg=f"block {removed}")
    # removing the image-only block changes nothing text-only
    with removed_blocks(stack, [CROSS]):
        torch.testing.assert_close(_logits(model), _logits(model.eval()), atol=0, rtol=0)
    assert text_model.cross_attention_layers == [CROSS] and model.config.text_config.cross_attention_layers == [CROSS]


@pytest.mark.slow
def test_prune_exports_renumbered_cross_attention_layers_that_reload_as_the_rebuilt_model(tmp_path):
    path = build_tower_checkpoint("mllama", tmp_path / "mllama")
    save = tmp_path / "pruned"
    result = invoke("prune", path, "--remove", "0", "--save", save)
    assert result.exit_code == 0, result.output
    config = json.loads((save / "config.json").read_text())
    assert config["text_config"]["num_hidden_layers"] == 3
    assert config["text_config"]["cross_attention_layers"] == [1]
    reloaded = tf.MllamaForConditionalGeneration.from_pretrained(save).eval()
    source = tf.MllamaForConditionalGeneration.from_pretrained(path).eval()
    torch.testing.assert_close(_logits(reloaded), _logits(mllama_without(source, [1, 2, 3])), atol=1e-5, rtol=1e-5)
