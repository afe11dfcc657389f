"""Finding the block stack: known paths, the repeated list a fallback picks, overrides, and models whose
blocks are not a plain list run once each (ALBERT's shared layer, reused or skipped blocks)."""

from __future__ import annotations

import pytest
import torch
import transformers as tf
from factories import small_config
from torch import nn

from layerprobe.core.errors import UnsupportedModel
from layerprobe.evaluate.replay import verify_head
from layerprobe.model import capture_block_states, find_layers

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


# ------------------------------------------------------------------- architectures at the edges


def test_llama4_text_stack_is_found_in_its_decoder_not_through_the_missing_prefix():
    """Llama4ForCausalLM names base_model_prefix "language_model", an attribute it lacks: base_model is itself."""
    torch.manual_seed(0)
    model = tf.Llama4ForCausalLM(small_config("llama4_text", vocab_size=512, positions=256)).eval()
    assert model.base_model is model  # the trap
    base = tf.AutoModel.from_config(model.config)
    assert find_layers(model).path == find_layers(base).path == "layers"
    assert find_layers(model).blocks is model.model.layers and find_layers(model, "model.layers").num_layers == 4

    class _Tokenizer:
        def __call__(self, _text, return_tensors):
            return {"input_ids": torch.arange(3, 15)[None]}

    assert verify_head(model, _Tokenizer()) is None  # the shared engine can split base model and head


class _Looped(nn.Module):
    """A root that calls its blocks in a given order (ALBERT-like reuse, or a skipped block)."""

    def __init__(self, order):
        super().__init__()
        self.blocks = nn.ModuleList(nn.Linear(4, 4) for _ in range(3))
        self.order = order

    def forward(self, x):
        for index in self.order:
            x = self.blocks[index](x)
        return x


@pytest.mark.parametrize(
    ("order", "message"), [([0, 1, 1, 2], "Block 1 .* ran 2 times"), ([0, 2], "Block 1 .* 0 times")]
)
def test_a_block_called_more_or_less_than_once_is_a_clear_error(order, message):
    model = _Looped(order)
    stack = find_layers(model)
    with pytest.raises(UnsupportedModel, match=message), torch.no_grad(), capture_block_states(stack):
        model(torch.randn(2, 4))
    assert not model._forward_hooks and not model._forward_pre_hooks  # hooks removed after the error


def test_a_list_that_repeats_one_module_is_refused():
    model = _Looped([0, 1, 2])
    shared = nn.Linear(4, 4)
    model.blocks = nn.ModuleList([shared, shared, shared])
    with pytest.raises(UnsupportedModel, match="repeat one module object"):
        find_layers(model, "blocks")


def test_albert_shared_layer_is_refused_with_no_path_suggested():
    model = tf.AlbertModel(small_config("albert", num_layers=3, vocab_size=64))
    for path in (None, "encoder.albert_layer_groups", "encoder.albert_layer_groups.0.albert_layers"):
        with pytest.raises(UnsupportedModel, match="ALBERT-style") as info:
            find_layers(model, path)
        assert "Pass --layers-path" not in info.value.hint
