"""Norm placement and sublayer discovery on tiny models whose wiring is known by construction."""

from __future__ import annotations

import math
import types

import pytest
import torch
import transformers as tf
from factories import build_checkpoint, small_base_model, small_config
from torch import nn

import layerprobe.model.trace as trace
from layerprobe.core.errors import UnsupportedModel
from layerprobe.model.placement import detect_placement, norm_kind
from layerprobe.model.stack import find_layers
from layerprobe.model.sublayers import find_model_sublayers

LAYERS = 4


def _ids(batch: int = 2, seq: int = 12) -> torch.Tensor:
    return torch.randint(3, 120, (batch, seq), generator=torch.Generator().manual_seed(1))


def _llama() -> nn.Module:
    return small_base_model(small_config("llama"))


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
    model = small_base_model(small_config("mistral", sliding_window=4))
    assert _place(model)[0].labels == ["Pre-LN"] * LAYERS


@pytest.mark.parametrize("config_class", [tf.BertConfig, tf.RobertaConfig])
def test_bert_and_roberta_are_post_ln(config_class):
    model = small_base_model(small_config({tf.BertConfig: "bert", tf.RobertaConfig: "roberta"}[config_class]))
    placement, subs = _place(model)
    assert placement.labels == ["Post-LN"] * LAYERS and placement.pattern == "Post-LN"
    assert subs[0].attention.module == "attention.output.dense"
    assert subs[0].mlp.module == "output.dense"
    assert placement.blocks[0].norms == {"attention.output.LayerNorm": "LayerNorm", "output.LayerNorm": "LayerNorm"}


def test_opt_post_ln_decoder():
    config = small_config("opt", do_layer_norm_before=False)
    assert _place(small_base_model(config))[0].labels == ["Post-LN"] * LAYERS
    config_pre = small_config("opt")
    assert _place(small_base_model(config_pre))[0].labels == ["Pre-LN"] * LAYERS


def test_gemma2_is_sandwich():
    placement, subs = _place(small_base_model(small_config("gemma2", sliding_window=4)))
    assert placement.labels == ["sandwich"] * LAYERS
    assert subs[0].attention.module == "post_attention_layernorm"
    assert subs[0].mlp.module == "post_feedforward_layernorm"
    assert "self_attn.q_proj.weight" in subs[0].attention.parameters


def test_gpt_neox_parallel_and_sequential():
    placement, subs = _place(small_base_model(small_config("gpt_neox", use_parallel_residual=True)))
    assert placement.labels == ["parallel"] * LAYERS
    assert subs[0].parallel and str(subs[0].attention.residual) == str(subs[0].mlp.residual) == "block input"
    assert (subs[0].attention.module, subs[0].mlp.module) == ("attention", "mlp")
    sequential, _ = _place(small_base_model(small_config("gpt_neox", use_parallel_residual=False)))
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


def test_placement_holds_with_the_float32_replay_used_on_gpus(monkeypatch):
    monkeypatch.setattr(trace, "replay_dtype", lambda device: torch.float32)
    model = _llama()
    for block in find_layers(model).blocks[:1]:
        block.forward = types.MethodType(_post_ln_forward, block)
    placement, subs = _place(model)
    assert placement.labels == ["Post-LN", "Pre-LN", "Pre-LN", "Pre-LN"]
    assert subs[1].attention.module == "self_attn"
    bert = small_base_model(small_config("bert"))
    assert _place(bert)[0].labels == ["Post-LN"] * LAYERS


def test_moe_shared_experts_stay_inside_the_mlp_sublayer(tmp_path):
    path = build_checkpoint("deepseek_v3", tmp_path / "ds", num_layers=3)  # block 0 dense, blocks 1-2 MoE
    model = tf.AutoModelForCausalLM.from_pretrained(path).eval()
    placement, subs = _place(model)
    assert placement.labels == ["Pre-LN"] * 3
    assert [s.mlp.module for s in subs] == ["mlp"] * 3
    assert any(p.startswith("mlp.shared_experts.") for p in subs[1].mlp.parameters)


@pytest.mark.parametrize(
    ("config", "label", "modules"),
    [
        (small_config("gpt2"), "Pre-LN", ("attn", "mlp")),
        (small_config("phi"), "parallel", ("self_attn", "mlp")),  # Phi-2: one shared input norm feeds both
        (small_config("gptj"), "parallel", ("attn", "mlp")),
    ],
)
def test_more_families(config, label, modules):
    placement, subs = _place(small_base_model(config))
    assert placement.labels == [label] * LAYERS
    assert (subs[0].attention.module, subs[0].mlp.module) == modules
