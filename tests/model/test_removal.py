"""Removing blocks in place: the pruned model equals one rebuilt without them, KV cache and derived layer
patterns included, and everything is restored afterwards (also after an exception)."""

from __future__ import annotations

import pytest
import torch
import transformers as tf
from factories import jamba_config, small_config
from reference import load_without_block, physically_deleted

from layerprobe.core.errors import UnsupportedModel
from layerprobe.model import find_layers, removed_blocks

CAUSAL = ["llama", "qwen3", "deepseek_v3", "gpt2"]


@pytest.mark.parametrize("arch", CAUSAL)
@pytest.mark.parametrize("layer", [0, 2, 3])
def test_removed_block_equals_physically_deleted_model(tiny_checkpoints, arch, layer):
    path = tiny_checkpoints[arch]
    model = tf.AutoModelForCausalLM.from_pretrained(path).eval()
    stack = find_layers(model)
    reference = physically_deleted(path, arch, layer)
    ids = torch.randint(3, 500, (2, 17))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        full = model(ids).logits
        with removed_blocks(stack, [layer]) as shrunk:
            assert shrunk.num_layers == 3 and model.config.num_hidden_layers == 3
            pruned = model(ids).logits
            # Generation with a KV cache (the cache is sized and indexed by the renumbered blocks).
            generated = model.generate(ids[:1, :5], max_new_tokens=6, do_sample=False, use_cache=True)
        expected = reference(ids).logits
        expected_generated = reference.generate(ids[:1, :5], max_new_tokens=6, do_sample=False, use_cache=True)
        no_cache = reference.generate(ids[:1, :5], max_new_tokens=6, do_sample=False, use_cache=False)
    assert torch.allclose(pruned, expected, atol=1e-5)
    assert not torch.allclose(pruned, full, atol=1e-3)
    assert torch.equal(generated, expected_generated) and torch.equal(generated, no_cache)
    # Restored: same blocks, same indices, same config, same weights, same outputs.
    assert model.config.num_hidden_layers == 4 and find_layers(model).blocks is stack.blocks
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
    with torch.no_grad():
        assert torch.equal(model(ids).logits, full)


def test_restored_after_an_exception(tiny_checkpoints):
    model = tf.AutoModelForCausalLM.from_pretrained(tiny_checkpoints["qwen3"]).eval()
    stack = find_layers(model)
    layer_types = list(model.config.layer_types)
    indices = [b.self_attn.layer_idx for b in stack.blocks]
    with pytest.raises(RuntimeError, match="boom"), removed_blocks(stack, [1, 2]):
        assert len(model.config.layer_types) == 2
        assert [b.self_attn.layer_idx for b in model.model.layers] == [0, 1]
        raise RuntimeError("boom")
    assert model.model.layers is stack.blocks and model.config.num_hidden_layers == 4
    assert list(model.config.layer_types) == layer_types
    assert [b.self_attn.layer_idx for b in stack.blocks] == indices


def test_removed_blocks_rejects_out_of_range(tiny_checkpoints):
    model = tf.AutoModelForCausalLM.from_pretrained(tiny_checkpoints["llama"])
    with pytest.raises(UnsupportedModel), removed_blocks(find_layers(model), [4]):
        pass


def test_jamba_with_a_block_removed_equals_a_physically_rebuilt_model():
    """Jamba derives `layer_types` from attn_layer_period/offset: removal must not realign the pattern.

    Six blocks, attention at 1 and 4 and experts at 1 and 4 (period 3, offset 1); without block 2 the kept
    blocks are mamba, attention+experts, mamba, attention+experts, mamba: exactly a five-block Jamba with
    period 2, offset 1 for both, built here from its own config with the remaining weights.
    """
    torch.manual_seed(0)
    model = tf.JambaForCausalLM(jamba_config(6, 3, 1, vocab_size=64)).eval()
    reference = load_without_block(model, tf.JambaForCausalLM(jamba_config(5, 2, 1, vocab_size=64)).eval(), 2)
    stack = find_layers(model)
    layer_types = list(model.config.layer_types)
    ids = torch.randint(1, 64, (2, 9))
    with torch.no_grad():
        expected = reference(ids, use_cache=True).logits
        with removed_blocks(stack, [2]):
            assert model.config.layer_types == reference.config.layer_types
            assert model.config.layers_num_experts == reference.config.layers_num_experts
            cached = model(ids, use_cache=True).logits  # the hybrid cache is built from layer_types
            uncached = model(ids, use_cache=False).logits
    assert torch.allclose(cached, expected, atol=1e-5) and torch.allclose(uncached, expected, atol=1e-5)
    assert model.config.layer_types == layer_types and model.config.num_hidden_layers == 6
    assert type(model.config) is tf.JambaConfig


def test_recurrent_gemma_cycle_is_pinned_to_the_kept_blocks():
    """RecurrentGemma derives layers_block_type by cycling block_types: without block 0 of (r, r, a) × 2 the
    kept blocks are r, a, r, r, a, which is a five-block model cycling (r, a, r), built here from its config."""

    def config(layers, block_types):
        return small_config("recurrent_gemma", num_layers=layers, vocab_size=64, block_types=block_types)

    torch.manual_seed(0)
    model = tf.RecurrentGemmaForCausalLM(config(6, ["recurrent", "recurrent", "attention"])).eval()
    reference = tf.RecurrentGemmaForCausalLM(config(5, ["recurrent", "attention", "recurrent"])).eval()
    load_without_block(model, reference, 0)
    ids = torch.randint(0, 64, (2, 12))
    with torch.no_grad():
        expected = reference(ids).logits
        expected_generated = reference.generate(ids[:1, :5], max_new_tokens=5, do_sample=False)
        with removed_blocks(find_layers(model), [0]):
            assert model.config.layers_block_type == reference.config.layers_block_type
            pruned = model(ids).logits
            generated = model.generate(ids[:1, :5], max_new_tokens=5, do_sample=False)
    assert torch.allclose(pruned, expected, atol=1e-5) and torch.equal(generated, expected_generated)
    assert len(model.config.layers_block_type) == 6
