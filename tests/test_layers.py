import pytest
import torch
import transformers as tf
from reference import physically_deleted
from torch import nn

from layerprobe.errors import UnsupportedModel
from layerprobe.layers import capture_block_states, find_layers, removed_blocks

CAUSAL = ["llama", "qwen3", "deepseek_v3", "gpt2"]
# Paths are relative to the base model, whether or not a head is loaded: the same in every result.
EXPECTED_PATHS = {
    ("llama", "base"): "layers",
    ("llama", "lm"): "layers",
    ("qwen3", "base"): "layers",
    ("qwen3", "lm"): "layers",
    ("deepseek_v3", "base"): "layers",
    ("deepseek_v3", "lm"): "layers",
    ("gpt2", "base"): "h",
    ("gpt2", "lm"): "h",
    ("bert", "base"): "encoder.layer",
}


@pytest.mark.parametrize(("arch", "head"), list(EXPECTED_PATHS))
def test_known_paths(tiny_checkpoints, arch, head):
    cls = tf.AutoModel if head == "base" else tf.AutoModelForCausalLM
    model = cls.from_pretrained(tiny_checkpoints[arch])
    stack = find_layers(model)
    assert stack.path == EXPECTED_PATHS[(arch, head)]
    assert stack.num_layers == model.config.num_hidden_layers == 4
    assert stack.blocks is model.base_model.get_submodule(stack.path)


def test_qa_model_path(tiny_checkpoints):
    model = tf.AutoModelForQuestionAnswering.from_pretrained(tiny_checkpoints["bert_qa"])
    stack = find_layers(model)
    assert stack.path == "encoder.layer" and stack.blocks is model.bert.encoder.layer


def test_layers_path_from_the_head_model_is_accepted(tiny_checkpoints):
    model = tf.AutoModelForCausalLM.from_pretrained(tiny_checkpoints["llama"])
    assert find_layers(model, "model.layers").path == "layers"
    assert find_layers(model, "layers").blocks is model.model.layers


class _Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.mix = nn.Linear(8, 8)
        self.experts = nn.ModuleList(nn.Linear(8, 8) for _ in range(6))  # more entries than blocks

    def forward(self, x):
        return x + self.mix(x) + sum(e(x) for e in self.experts)


class _Odd(nn.Module):
    """A model whose blocks live at an unusual path."""

    def __init__(self):
        super().__init__()
        self.trunk = nn.Module()
        self.trunk.stages = nn.ModuleList(_Block() for _ in range(3))
        self.heads = nn.ModuleList([nn.Linear(8, 2), nn.Linear(8, 3)])

    def forward(self, x):
        for block in self.trunk.stages:
            x = block(x)
        return x


def test_fallback_picks_the_repeated_stack_not_the_experts():
    stack = find_layers(_Odd())
    assert stack.path == "trunk.stages" and stack.num_layers == 3


def test_override_and_errors():
    model = _Odd()
    assert find_layers(model, "trunk.stages").num_layers == 3
    with pytest.raises(UnsupportedModel, match="does not exist"):
        find_layers(model, "trunk.nothing")
    with pytest.raises(UnsupportedModel, match="not a list of blocks"):
        find_layers(model, "trunk.stages.0.mix")
    with pytest.raises(UnsupportedModel, match="Cannot find the transformer blocks"):
        find_layers(nn.Sequential(nn.Linear(2, 2)))


def test_capture_records_every_block_input_and_last_output():
    model = _Odd()
    stack = find_layers(model)
    x = torch.randn(2, 5, 8)
    with torch.no_grad(), capture_block_states(stack) as states:
        y = model(x)
    expected = [x]
    for block in stack.blocks:
        expected.append(block(expected[-1]))
    assert len(states) == 4
    assert all(torch.equal(a, b) for a, b in zip(states, expected, strict=True))
    assert torch.equal(states[-1], y)
    assert all(not b._forward_pre_hooks and not b._forward_hooks for b in stack.blocks)


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
