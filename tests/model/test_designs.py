"""Designs that index by layer outside their blocks: the in-memory removal against a model rebuilt without the block.

The reference is built in the test, independently of `designs.py`: a config written for 3 blocks by hand
(per-layer lists trimmed, hybrid ids and per-layer overrides renumbered), and the source's weights copied in
by name — block i of the new model from its source block, each layer's slice of the per-layer embedding and
projection cut out with a reshape, Zamba2's adapters taken from the kept hybrid layers' slots.
"""

from __future__ import annotations

import re

import pytest
import torch
import transformers as tf
from factories import DESIGN_FAMILIES, design_config, randomize_norms

from layerprobe.model import find_layers, removed_blocks
from layerprobe.model.designs import designs_of

IDS = torch.tensor([[1, 17, 40, 93, 5, 250, 7, 64, 301, 12, 33, 2]])


def _model(family: str):
    torch.manual_seed(2)
    model = tf.AutoModelForCausalLM.from_config(design_config(family)).eval()
    return randomize_norms(model, lambda name: "norm" in name.lower())


def _kept_config(family: str, kept: list[int]):
    """The config of the same model with only `kept` blocks, written out field by field for each family."""
    config = design_config(family).to_dict()
    config["num_hidden_layers"] = len(kept)
    for key in ("layer_types", "layers_block_type", "activation_sparsity_pattern", "intermediate_size"):
        if isinstance(config.get(key), list) and len(config[key]) == 4:
            config[key] = [config[key][i] for i in kept]
    if family == "gemma4":
        config["per_layer_config"] = {str(new): {"head_dim": 16} for new, old in enumerate(kept) if old in (1, 3)}
    if family == "zamba2":
        config["hybrid_layer_ids"] = [new for new, old in enumerate(kept) if old in (1, 3)]
    return type(design_config(family)).from_dict(config)


def _rebuilt(family: str, model, kept: list[int]):
    """A model built from `_kept_config` holding the source's weights for the kept blocks."""
    source = model.state_dict()
    target = tf.AutoModelForCausalLM.from_config(_kept_config(family, kept)).eval()
    hybrid_slots = [slot for slot, layer in enumerate((1, 3)) if layer in kept]  # zamba2: adapters per hybrid layer
    width = 8  # hidden_size_per_layer_input
    state = {}
    for name, tensor in target.state_dict().items():
        old = re.sub(r"layers\.(\d+)\.", lambda m: f"layers.{kept[int(m.group(1))]}.", name, count=1)
        old = re.sub(r"_adapter_list\.(\d+)\.", lambda m: f"_adapter_list.{hybrid_slots[int(m.group(1))]}.", old)
        value = source[old]
        if name.endswith("embed_tokens_per_layer.weight"):
            value = value.reshape(value.shape[0], 4, width)[:, kept].reshape(value.shape[0], -1)
        elif name.endswith("per_layer_model_projection.weight"):
            value = value.reshape(4, width, -1)[kept].reshape(-1, value.shape[-1])
        assert value.shape == tensor.shape, name
        state[name] = value
    target.load_state_dict(state, strict=True)
    return target


@pytest.mark.slow
@pytest.mark.parametrize("family", DESIGN_FAMILIES)
def test_in_memory_removal_computes_the_model_rebuilt_without_the_block(family):
    model = _model(family)
    stack = find_layers(model)
    # Gemma-4 makes its last block full attention: no config rebuilds blocks 0-2 (export refuses it, test_save)
    for removed in range(3 if family == "gemma4" else 4):
        kept = [i for i in range(4) if i != removed]
        with torch.no_grad():
            with removed_blocks(stack, [removed]):
                in_memory = model(input_ids=IDS, use_cache=False).logits
            expected = _rebuilt(family, model, kept)(input_ids=IDS, use_cache=False).logits
        torch.testing.assert_close(in_memory, expected, atol=1e-5, rtol=1e-5, msg=f"{family}, block {removed}")
    # and the model is whole again afterwards
    assert stack.num_layers == 4 and model.config.num_hidden_layers == 4


def test_every_design_family_has_its_rule():
    """Each family is known by the rule its design needs (Nemotron-H needs none: its replay copies block_type)."""
    names = {family: sorted(d.name for d in designs_of(design_config(family))) for family in DESIGN_FAMILIES}
    assert names == {
        "gemma3n": ["kv sharing", "per-layer inputs"],
        "gemma4": ["kv sharing", "last block full attention", "per-layer config", "per-layer inputs"],
        "zamba2": ["shared-block map"],
        "nemotron_h": [],
        "minimax": ["saved depth buffers"],
    }
