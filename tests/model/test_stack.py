import pytest
import torch
import transformers as tf
from reference import physically_deleted
from torch import nn

from layerprobe.core.errors import UnsupportedModel
from layerprobe.model import capture_block_states, find_layers, removed_blocks

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


# ------------------------------------------------------------------- architectures at the edges (issue 8)
def _jamba_config(layers, attn_period, attn_offset, expert_period, expert_offset):
    return tf.JambaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=48, num_attention_heads=4, num_key_value_heads=2,
        num_hidden_layers=layers, num_experts=2, num_experts_per_tok=1,
        attn_layer_period=attn_period, attn_layer_offset=attn_offset,
        expert_layer_period=expert_period, expert_layer_offset=expert_offset,
        use_mamba_kernels=False, mamba_d_state=4, mamba_d_conv=4, mamba_expand=2, pad_token_id=0,
    )  # fmt: skip


def test_jamba_with_a_block_removed_equals_a_physically_rebuilt_model():
    """Jamba derives `layer_types` from attn_layer_period/offset: removal must not realign the pattern.

    Six blocks, attention at 1 and 4 and experts at 1 and 4 (period 3, offset 1); without block 2 the kept
    blocks are mamba, attention+experts, mamba, attention+experts, mamba: exactly a five-block Jamba with
    period 2, offset 1 for both, built here from its own config with the remaining weights.
    """
    torch.manual_seed(0)
    model = tf.JambaForCausalLM(_jamba_config(6, 3, 1, 3, 1)).eval()
    reference = tf.JambaForCausalLM(_jamba_config(5, 2, 1, 2, 1)).eval()
    state = {}
    for key, value in model.state_dict().items():
        if key.startswith("model.layers."):
            index, rest = key[len("model.layers.") :].split(".", 1)
            if int(index) == 2:
                continue
            key = f"model.layers.{int(index) - (int(index) > 2)}.{rest}"
        state[key] = value
    reference.load_state_dict(state, strict=True)
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


def _llama4_text(num_layers=4):
    return tf.Llama4TextConfig(
        vocab_size=512, hidden_size=32, intermediate_size=32, intermediate_size_mlp=64, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, num_hidden_layers=num_layers, num_local_experts=2,
        interleave_moe_layer_step=2, max_position_embeddings=256, bos_token_id=1, eos_token_id=2, pad_token_id=0,
        architectures=["Llama4ForCausalLM"],
    )  # fmt: skip


def test_llama4_text_stack_is_found_in_its_decoder_not_through_the_missing_prefix():
    """Llama4ForCausalLM names base_model_prefix "language_model", an attribute it lacks: base_model is itself."""
    from layerprobe.evaluate.replay import verify_head

    torch.manual_seed(0)
    model = tf.Llama4ForCausalLM(_llama4_text()).eval()
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
    config = tf.AlbertConfig(
        vocab_size=64, embedding_size=16, hidden_size=32, intermediate_size=64, num_attention_heads=4,
        num_hidden_layers=3,
    )  # fmt: skip
    model = tf.AlbertModel(config)
    for path in (None, "encoder.albert_layer_groups", "encoder.albert_layer_groups.0.albert_layers"):
        with pytest.raises(UnsupportedModel, match="ALBERT-style") as info:
            find_layers(model, path)
        assert "Pass --layers-path" not in info.value.hint


def test_recurrent_gemma_cycle_is_pinned_to_the_kept_blocks():
    """RecurrentGemma derives layers_block_type by cycling block_types: without block 0 of (r, r, a) × 2 the
    kept blocks are r, a, r, r, a, which is a five-block model cycling (r, a, r), built here from its config."""

    def config(layers, block_types):
        return tf.RecurrentGemmaConfig(
            num_hidden_layers=layers, vocab_size=64, hidden_size=32, intermediate_size=48, num_attention_heads=4,
            num_key_value_heads=1, head_dim=8, lru_width=32, attention_window_size=8, conv1d_width=4,
            block_types=block_types,
        )  # fmt: skip

    torch.manual_seed(0)
    model = tf.RecurrentGemmaForCausalLM(config(6, ["recurrent", "recurrent", "attention"])).eval()
    reference = tf.RecurrentGemmaForCausalLM(config(5, ["recurrent", "attention", "recurrent"])).eval()
    state = {}
    for key, value in model.state_dict().items():
        if key.startswith("model.layers."):
            index, rest = key[len("model.layers.") :].split(".", 1)
            if index == "0":
                continue
            key = f"model.layers.{int(index) - 1}.{rest}"
        state[key] = value
    reference.load_state_dict(state, strict=True)
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
