"""Norm placement and sublayer discovery on tiny models whose wiring is known by construction."""

from __future__ import annotations

import math
import types

import pytest
import torch
import transformers as tf
from torch import nn

from layerprobe.core.errors import UnsupportedModel
from layerprobe.model.placement import detect_placement, norm_kind
from layerprobe.model.stack import find_layers
from layerprobe.model.sublayers import find_model_sublayers

torch.set_num_threads(1)  # tiny tensors: threads only contend on a shared machine
LAYERS = 4
COMMON = dict(vocab_size=128, num_hidden_layers=LAYERS, max_position_embeddings=64)


def _build(config) -> nn.Module:
    torch.manual_seed(0)
    model = tf.AutoModel.from_config(config)
    with torch.no_grad():  # trained norms are not identities: random gains and biases
        for name, param in model.named_parameters():
            if "norm" in name.lower() or "ln" in name.lower():
                param.uniform_(0.5, 1.5)
    return model.eval()


def _ids(batch: int = 2, seq: int = 12) -> torch.Tensor:
    return torch.randint(3, 120, (batch, seq), generator=torch.Generator().manual_seed(1))


def _llama(**extra) -> nn.Module:
    return _build(
        tf.LlamaConfig(
            hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2, **COMMON, **extra
        )
    )


def _place(model):
    stack = find_layers(model)
    placement, subs = detect_placement(model, stack, _ids())
    return placement, subs


def _post_ln_forward(self, hidden_states, *args, position_embeddings=None, attention_mask=None, **kwargs):
    """Post-LN as in the Mix-LN paper (and the original Transformer): x ← LN(x + F(x)) for each sublayer."""
    attn, _ = self.self_attn(
        hidden_states=hidden_states, attention_mask=attention_mask, position_embeddings=position_embeddings, **kwargs
    )
    hidden_states = self.input_layernorm(hidden_states + attn)
    return self.post_attention_layernorm(hidden_states + self.mlp(hidden_states))


class ScaledNorm(nn.Module):
    """LayerNorm Scaling (Sun et al. 2025): the norm's output times 1/√ℓ, ℓ the 1-based depth."""

    def __init__(self, norm: nn.Module, depth: int) -> None:
        super().__init__()
        self.norm = norm
        self.scale = 1.0 / math.sqrt(depth)

    def forward(self, x):
        return self.norm(x) * self.scale


def test_llama_is_pre_ln_and_sublayers_are_found():
    placement, subs = _place(_llama())
    assert placement.labels == ["Pre-LN"] * LAYERS
    assert placement.pattern == "Pre-LN" and placement.summary == "Pre-LN in all 4 blocks"
    assert all(
        b.norms == {"input_layernorm": "RMSNorm", "post_attention_layernorm": "RMSNorm"} for b in placement.blocks
    )
    first = subs[0]
    assert (first.attention.module, first.mlp.module, first.parallel) == ("self_attn", "mlp", False)
    assert str(first.attention.residual) == "block input"
    assert str(first.mlp.residual) == "input of post_attention_layernorm"
    assert set(first.attention.parameters) == {
        "input_layernorm.weight",
        *(f"self_attn.{p}_proj.weight" for p in "qkvo"),
    }
    assert set(first.mlp.parameters) == {"post_attention_layernorm.weight"} | {
        f"mlp.{p}_proj.weight" for p in ("gate", "up", "down")
    }


def test_mistral_is_pre_ln():
    model = _build(
        tf.MistralConfig(
            hidden_size=32,
            intermediate_size=64,
            num_attention_heads=4,
            num_key_value_heads=2,
            sliding_window=4,
            **COMMON,
        )
    )
    assert _place(model)[0].labels == ["Pre-LN"] * LAYERS


@pytest.mark.parametrize("config_class", [tf.BertConfig, tf.RobertaConfig])
def test_bert_and_roberta_are_post_ln(config_class):
    model = _build(config_class(hidden_size=32, intermediate_size=64, num_attention_heads=4, **COMMON))
    placement, subs = _place(model)
    assert placement.labels == ["Post-LN"] * LAYERS and placement.pattern == "Post-LN"
    assert subs[0].attention.module == "attention.output.dense"
    assert subs[0].mlp.module == "output.dense"
    assert placement.blocks[0].norms == {"attention.output.LayerNorm": "LayerNorm", "output.LayerNorm": "LayerNorm"}


def test_opt_post_ln_decoder():
    config = tf.OPTConfig(
        hidden_size=32,
        ffn_dim=64,
        num_attention_heads=4,
        word_embed_proj_dim=32,
        do_layer_norm_before=False,
        **COMMON,
    )
    assert _place(_build(config))[0].labels == ["Post-LN"] * LAYERS
    config_pre = tf.OPTConfig(hidden_size=32, ffn_dim=64, num_attention_heads=4, word_embed_proj_dim=32, **COMMON)
    assert _place(_build(config_pre))[0].labels == ["Pre-LN"] * LAYERS


def test_gemma2_is_sandwich():
    config = tf.Gemma2Config(
        hidden_size=32,
        intermediate_size=64,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        sliding_window=4,
        **COMMON,
    )
    placement, subs = _place(_build(config))
    assert placement.labels == ["sandwich"] * LAYERS
    assert subs[0].attention.module == "post_attention_layernorm"
    assert subs[0].mlp.module == "post_feedforward_layernorm"
    assert "self_attn.q_proj.weight" in subs[0].attention.parameters


def test_gpt_neox_parallel_and_sequential():
    common = dict(hidden_size=32, intermediate_size=64, num_attention_heads=4, **COMMON)
    placement, subs = _place(_build(tf.GPTNeoXConfig(use_parallel_residual=True, **common)))
    assert placement.labels == ["parallel"] * LAYERS
    assert subs[0].parallel and str(subs[0].attention.residual) == str(subs[0].mlp.residual) == "block input"
    assert (subs[0].attention.module, subs[0].mlp.module) == ("attention", "mlp")
    sequential, _ = _place(_build(tf.GPTNeoXConfig(use_parallel_residual=False, **common)))
    assert sequential.labels == ["Pre-LN"] * LAYERS


def test_mix_ln_llama_rewired_in_the_test():
    model = _llama()
    for block in find_layers(model).blocks[:2]:
        block.forward = types.MethodType(_post_ln_forward, block)
    placement, _ = _place(model)
    assert placement.labels == ["Post-LN", "Post-LN", "Pre-LN", "Pre-LN"]
    assert placement.pattern == "Mix-LN" and placement.transition == 2
    assert placement.summary == "Post-LN in blocks 0–1, Pre-LN in blocks 2–3: Mix-LN, transition at 2"


def test_layernorm_scaling_llama_built_in_the_test():
    model = _llama()
    for l, block in enumerate(find_layers(model).blocks):
        block.input_layernorm = ScaledNorm(block.input_layernorm, l + 1)
        block.post_attention_layernorm = ScaledNorm(block.post_attention_layernorm, l + 1)
    placement, _ = _place(model)
    assert placement.labels == ["Pre-LN"] * LAYERS
    assert placement.blocks[0].norm_scale is None
    for l in range(1, LAYERS):
        assert placement.blocks[l].norm_scale == pytest.approx(1 / math.sqrt(l + 1), rel=1e-9)
    assert placement.pattern == "LayerNorm Scaling"
    assert placement.summary.endswith("with LayerNorm Scaling (norm outputs × 1/√(l+1))")


def test_a_constant_norm_scale_is_reported_but_not_called_lns():
    model = _llama()
    for block in find_layers(model).blocks:
        block.input_layernorm = ScaledNorm(block.input_layernorm, 4)
    placement, _ = _place(model)
    assert placement.pattern == "Pre-LN"
    assert "scaled per block (0.5, 0.5, 0.5, 0.5)" in placement.summary


def test_a_norm_free_block_is_unrecognised_not_guessed():
    model = _llama()
    for block in find_layers(model).blocks:
        block.input_layernorm = nn.Identity()
        block.post_attention_layernorm = nn.Identity()
    placement, subs = _place(model)
    assert placement.labels == ["unrecognised"] * LAYERS
    assert "normalises" in placement.blocks[0].reason
    assert subs[0] is not None and subs[0].attention.module == "self_attn"  # sublayers still found


def test_a_block_without_two_contributions_raises_unsupported():
    model = _llama()

    def attention_only(self, hidden_states, *args, position_embeddings=None, attention_mask=None, **kwargs):
        attn, _ = self.self_attn(
            hidden_states=self.input_layernorm(hidden_states),
            attention_mask=attention_mask,
            position_embeddings=position_embeddings,
        )
        return hidden_states + attn

    for block in find_layers(model).blocks:
        block.forward = types.MethodType(attention_only, block)
    with pytest.raises(UnsupportedModel, match="expected 2 residual contributions"):
        find_model_sublayers(model, find_layers(model), _ids())
    placement, _ = _place(model)
    assert placement.labels == ["unrecognised"] * LAYERS and placement.pattern == "unrecognised"


def test_norm_kind_tells_layernorm_from_rmsnorm_and_rejects_linear():
    torch.manual_seed(0)
    x = torch.randn(20, 16, dtype=torch.float64) * 3 + 1
    ln = nn.LayerNorm(16).double()
    nn.init.uniform_(ln.weight, 0.5, 1.5)
    nn.init.uniform_(ln.bias, -1, 1)
    assert norm_kind(x, ln(x).detach()) == "LayerNorm"
    rms = x / x.pow(2).mean(-1, keepdim=True).sqrt() * torch.linspace(0.5, 1.5, 16, dtype=torch.float64)
    assert norm_kind(x, rms) == "RMSNorm"
    linear = nn.Linear(16, 16).double()
    assert norm_kind(x, linear(x).detach()) is None
    assert norm_kind(x, x.clone()) is None  # an identity is not a norm


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        (
            tf.Gemma2Config(
                hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=8, **COMMON
            ),
            "sandwich",
        ),
        (tf.GPTNeoXConfig(hidden_size=32, intermediate_size=64, num_attention_heads=4, **COMMON), "parallel"),
        (tf.BertConfig(hidden_size=32, intermediate_size=64, num_attention_heads=4, **COMMON), "Post-LN"),
    ],
)
def test_placement_of_a_weightless_skeleton(config, expected):
    from accelerate import init_empty_weights

    from layerprobe.model.skeleton import placement_without_weights

    with init_empty_weights():
        skeleton = tf.AutoModel.from_config(config)
    stack = find_layers(skeleton)
    assert next(skeleton.parameters()).is_meta
    placement = placement_without_weights(skeleton, stack, config.vocab_size)
    assert placement.labels == [expected] * LAYERS
    assert all(p.is_meta for p in skeleton.parameters())  # nothing stays materialised


def test_layers_command_prints_placement(tmp_path):
    from factories import build_checkpoint
    from typer.testing import CliRunner

    from layerprobe.cli.app import app

    path = build_checkpoint("llama", tmp_path / "llama", num_layers=3)
    result = CliRunner().invoke(app, ["layers", str(path)])
    assert result.exit_code == 0, result.output
    assert result.output.count("Pre-LN") == 4  # three rows and the summary
    assert "placement: Pre-LN in all 3 blocks" in result.output
    quiet = CliRunner().invoke(app, ["layers", str(path), "--no-placement"])
    assert quiet.exit_code == 0 and "Pre-LN" not in quiet.output


def test_placement_holds_with_the_float32_replay_used_on_gpus(monkeypatch):
    import layerprobe.model.trace as trace

    monkeypatch.setattr(trace, "replay_dtype", lambda device: torch.float32)
    model = _llama()
    for block in find_layers(model).blocks[:1]:
        block.forward = types.MethodType(_post_ln_forward, block)
    placement, subs = _place(model)
    assert placement.labels == ["Post-LN", "Pre-LN", "Pre-LN", "Pre-LN"]
    assert subs[1].attention.module == "self_attn"
    bert = _build(tf.BertConfig(hidden_size=32, intermediate_size=64, num_attention_heads=4, **COMMON))
    assert _place(bert)[0].labels == ["Post-LN"] * LAYERS


def test_moe_shared_experts_stay_inside_the_mlp_sublayer(tmp_path):
    from factories import build_checkpoint

    path = build_checkpoint("deepseek_v3", tmp_path / "ds", num_layers=3)  # block 0 dense, blocks 1-2 MoE
    model = tf.AutoModelForCausalLM.from_pretrained(path).eval()
    placement, subs = _place(model)
    assert placement.labels == ["Pre-LN"] * 3
    assert [s.mlp.module for s in subs] == ["mlp"] * 3
    assert any(p.startswith("mlp.shared_experts.") for p in subs[1].mlp.parameters)


@pytest.mark.parametrize(
    ("config", "label", "modules"),
    [
        (tf.GPT2Config(n_embd=32, n_head=4, n_layer=LAYERS, vocab_size=128, n_positions=64), "Pre-LN", ("attn", "mlp")),
        (  # Phi-2: one shared input norm feeds attention and MLP, both added to x
            tf.PhiConfig(hidden_size=32, intermediate_size=64, num_attention_heads=4, **COMMON),
            "parallel",
            ("self_attn", "mlp"),
        ),
        (
            tf.GPTJConfig(n_embd=32, n_head=4, n_layer=LAYERS, vocab_size=128, n_positions=64, rotary_dim=4),
            "parallel",
            ("attn", "mlp"),
        ),
    ],
)
def test_more_families(config, label, modules):
    placement, subs = _place(_build(config))
    assert placement.labels == [label] * LAYERS
    assert (subs[0].attention.module, subs[0].mlp.module) == modules
