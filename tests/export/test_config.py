"""The exported config: per-layer fields rewritten for the kept blocks, or the export refused before any
weight is read when no config can describe them."""

from __future__ import annotations

import pytest
import transformers as tf
from factories import copy_without_weights, export_config

import layerprobe.export.config as export_config_module
from layerprobe.core import ExportSpec, ModelSpec
from layerprobe.core.errors import UnsupportedModel
from layerprobe.export.config import PeriodicRule, block_signature, build_skeleton, first_difference, kept_config
from layerprobe.export.save import run_export
from layerprobe.model import find_layers


def test_config_rules_on_a_config_alone():
    """Per-layer lists (any name), index lists, string patterns and token lists, for L = 4, keeping 0, 2, 3."""
    config = tf.PretrainedConfig(
        num_hidden_layers=4,
        block_types=["a", "b", "c", "d"],  # one entry per layer, no "layer" in its name
        no_rope_layers=[1, 1, 0, 1],  # per layer, values that look like indices
        moe_layers=[1, 3],  # indices
        hybrid_override_pattern="M*M-",
        eos_token_id=[1, 2, 3, 4],  # a list of length L that is not per layer
        first_k_dense_replace=2,
    )
    new, changes = kept_config(config, 4, [0, 2, 3])
    assert new.num_hidden_layers == 3 and config.num_hidden_layers == 4
    assert new.block_types == ["a", "c", "d"] and new.no_rope_layers == [1, 0, 1]
    assert new.moe_layers == [2] and new.hybrid_override_pattern == "MM-"
    assert new.eos_token_id == [1, 2, 3, 4] and "eos_token_id" not in changes
    assert new.first_k_dense_replace == 1 and changes["first_k_dense_replace"] == 1


@pytest.mark.parametrize(
    ("pattern", "solution"),
    [
        ([False, True, False, True], (2, 1)),  # unchanged
        ([True, False, True], (2, 0)),
        ([False, False, True], (3, 2)),
        ([False, True, True, False, True], None),  # no period and offset give this
    ],
)
def test_periodic_rule_solves_or_refuses(pattern, solution):
    config = tf.PretrainedConfig(attn_layer_period=2, attn_layer_offset=1)
    solved = PeriodicRule("attn_layer_period", "attn_layer_offset").solve(config, pattern)
    if solution is None:
        assert solved is None
    else:
        assert solved == {"attn_layer_period": solution[0], "attn_layer_offset": solution[1]}
        assert [i % solution[0] == solution[1] for i in range(len(pattern))] == pattern


def test_block_signature_tells_sliding_from_full_attention():
    blocks = find_layers(build_skeleton(tf.Qwen3ForCausalLM, export_config("qwen3"))).blocks  # full, full, sliding, …
    assert first_difference(block_signature(blocks[0]), block_signature(blocks[1])) is None
    difference = first_difference(block_signature(blocks[1]), block_signature(blocks[2]))
    assert difference and ("sliding" in difference or "attention_type" in difference)


def test_unexpressible_pattern_refused_before_weights_load(export_sources, tmp_path):
    # Jamba attention at 1, 3, 5; removing block 2 keeps mamba, attn, attn, mamba, attn: not periodic.
    source = copy_without_weights(export_sources("jamba"), tmp_path / "no-weights")
    with pytest.raises(UnsupportedModel, match="attn_layer_period, attn_layer_offset"):
        run_export(ExportSpec(ModelSpec(str(source)), str(tmp_path / "out"), remove="2"))


def test_rebuilt_blocks_are_verified_when_no_rule_knows_the_field(export_sources, tmp_path, monkeypatch):
    """Without the rule for first_k_dense_replace, the rebuilt block 0 is MoE where the kept one is dense."""
    monkeypatch.setattr(export_config_module, "RULES", ())
    source = copy_without_weights(export_sources("deepseek_v3"), tmp_path / "no-weights")
    with pytest.raises(UnsupportedModel, match=r"(?s)different block 1 .*first_k_dense_replace"):
        run_export(ExportSpec(ModelSpec(str(source)), str(tmp_path / "out"), remove="0"))
