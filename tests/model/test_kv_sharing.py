"""Gemma-3n and Gemma-4 with KV sharing on: removing a block, in memory and exported, against a rebuilt model.

With `num_kv_shared_layers=1` and layer types (full, full, sliding, full), block 1 stores the full-attention
keys and values and block 3 reuses them; block 2 stores the sliding ones. The reference is built in the
test: a config for the kept blocks written out by hand (types trimmed, the count of sharing blocks
renumbered), the source's weights copied in by name (per-layer slices cut with a reshape) — transformers
then decides which kept block stores, so removing block 1 must make block 0 the store. Removing the only
block of a type before the sharing ones leaves nothing to reuse: refused, and each hint is tried.
"""

from __future__ import annotations

import re

import pytest
import torch
import transformers as tf
from factories import byte_level_tokenizer, kv_sharing_config, randomize_norms

from layerprobe.core import ExportSpec, ModelSpec, UnsupportedModel
from layerprobe.export.save import run_export
from layerprobe.model import find_layers, quiet_transformers, removed_blocks

IDS = torch.tensor([[1, 17, 40, 93, 5, 250, 7, 64, 301, 12, 33, 2]])
F, S = "full_attention", "sliding_attention"
SHARED = [F, F, S, F]  # block 3 reuses block 1's keys and values
ORPHANING = [S, F, S, F]  # block 1 is the only full-attention block before block 3, which reuses it


def _model(family: str, types: list[str]):
    torch.manual_seed(3)
    model = tf.AutoModelForCausalLM.from_config(kv_sharing_config(family, types, 1)).eval()
    return randomize_norms(model, lambda name: "norm" in name.lower())


def _rebuilt(family: str, types: list[str], model, kept: list[int]):
    """The model of the kept blocks from a config written for them, holding the source's weights."""
    fields = kv_sharing_config(family, types, 1).to_dict()
    fields.update(num_hidden_layers=len(kept), layer_types=[types[i] for i in kept])
    fields["num_kv_shared_layers"] = 1 if 3 in kept else 0  # block 3 is the one sharing block
    for key in ("activation_sparsity_pattern", "intermediate_size"):  # per-layer lists where the config has them
        if isinstance(fields.get(key), list):
            fields[key] = [fields[key][i] for i in kept]
    config = type(model.config).from_dict(fields)
    target = tf.AutoModelForCausalLM.from_config(config).eval()
    source, width = model.state_dict(), 8  # hidden_size_per_layer_input
    state = {}
    for name, tensor in target.state_dict().items():
        value = source[re.sub(r"layers\.(\d+)\.", lambda m: f"layers.{kept[int(m.group(1))]}.", name, count=1)]
        if name.endswith("embed_tokens_per_layer.weight"):
            value = value.reshape(value.shape[0], 4, width)[:, kept].reshape(value.shape[0], -1)
        elif name.endswith("per_layer_model_projection.weight"):
            value = value.reshape(4, width, -1)[kept].reshape(-1, value.shape[-1])
        assert value.shape == tensor.shape, name
        state[name] = value
    target.load_state_dict(state, strict=True)
    return target, config


def _save(model, directory):
    model.save_pretrained(directory)
    byte_level_tokenizer(add_bos=True).save_pretrained(directory)
    return directory


def _logits(model):
    with torch.no_grad():
        return model(input_ids=IDS, use_cache=False).logits


@pytest.mark.slow
@pytest.mark.parametrize("family", ["gemma3n", "gemma4"])
def test_in_memory_removal_with_kv_sharing_computes_the_model_rebuilt_without_the_block(family):
    model = _model(family, SHARED)
    stack = find_layers(model)
    assert model.config.kv_sharing_modes == [None, "store", "store", "reuse"]
    # Gemma-4 makes its last block full attention: no config rebuilds blocks 0-2 (export refuses it)
    for removed in range(3 if family == "gemma4" else 4):
        kept = [i for i in range(4) if i != removed]
        expected_model, config = _rebuilt(family, SHARED, model, kept)
        if removed == 1:  # the full-attention store is gone: block 0 stores now, for block 3
            assert config.kv_sharing_modes == ["store", "store", "reuse"]
        with removed_blocks(stack, [removed]):
            in_memory = _logits(model)
        torch.testing.assert_close(in_memory, _logits(expected_model), atol=1e-5, rtol=1e-5, msg=f"block {removed}")
    # and the model is whole again: its own logits, block 0 no longer storing
    assert [layer.self_attn.store_full_length_kv for layer in stack.blocks] == [False, True, True, False]
    torch.testing.assert_close(_logits(model), _logits(_model(family, SHARED)))


@pytest.mark.slow
@pytest.mark.parametrize("family", ["gemma3n", "gemma4"])
def test_exported_kv_sharing_model_renumbers_and_reloads_as_the_rebuilt_model(family, tmp_path):
    model = _model(family, SHARED)
    source = _save(model, tmp_path / "source")
    for removed in (0, 1, 2):
        out = tmp_path / f"without-{removed}"
        run_export(ExportSpec(ModelSpec(str(source)), str(out), remove=str(removed)))
        with quiet_transformers():
            reloaded, info = tf.AutoModelForCausalLM.from_pretrained(out, output_loading_info=True)
        assert not info["missing_keys"] and not info["unexpected_keys"], info
        assert reloaded.config.num_hidden_layers == 3 and reloaded.config.num_kv_shared_layers == 1
        kept = [i for i in range(4) if i != removed]
        expected_model, _ = _rebuilt(family, SHARED, model, kept)
        torch.testing.assert_close(_logits(reloaded.eval()), _logits(expected_model), atol=1e-5, rtol=1e-5)


@pytest.mark.slow
def test_removing_the_only_store_of_a_type_is_refused_and_both_hints_work(tmp_path):
    """Gemma-3n: keep block 1, or remove block 3 with it; both work."""
    model = _model("gemma3n", ORPHANING)
    stack = find_layers(model)
    with pytest.raises(UnsupportedModel, match=r"block 3 reuses the keys and values of the last full_attention") as e:
        with removed_blocks(stack, [1]):
            pass
    assert "before the KV-sharing blocks (3): without block 1 no block computes them." in e.value.message
    assert e.value.hint == "Keep block 1, or also remove block 3 (prune-drop: --layers without them)."
    source = _save(model, tmp_path / "source")
    with pytest.raises(UnsupportedModel, match="no block computes them"):
        run_export(ExportSpec(ModelSpec(str(source)), str(tmp_path / "refused"), remove="1"))
    assert not (tmp_path / "refused").exists()
    # the hints: keep block 1 (remove another), or remove block 3 with it
    for remove, kept in (("2", [0, 1, 3]), ("1,3", [0, 2])):
        out = tmp_path / f"without-{remove}"
        run_export(ExportSpec(ModelSpec(str(source)), str(out), remove=remove))
        with quiet_transformers():
            reloaded = tf.AutoModelForCausalLM.from_pretrained(out).eval()
        expected_model, _ = _rebuilt("gemma3n", ORPHANING, model, kept)
        torch.testing.assert_close(_logits(reloaded), _logits(expected_model), atol=1e-5, rtol=1e-5)


@pytest.mark.slow
def test_gemma4_offers_only_the_hint_that_its_last_full_block_allows():
    """Gemma-4: removing blocks 1 and 3 would end on sliding attention, so only "keep block 1" is offered."""
    model = _model("gemma4", ORPHANING)
    with pytest.raises(UnsupportedModel, match="no block computes them") as e:
        with removed_blocks(find_layers(model), [1]):
            pass
    assert e.value.hint == "Keep block 1 (prune-drop: --layers without them)."
    with removed_blocks(find_layers(model), [2]):  # the hint: block 1 kept
        assert _logits(model).isfinite().all()
