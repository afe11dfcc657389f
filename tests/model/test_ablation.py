"""Sublayer and span ablation against independent references.

Sublayer ablation is checked against a copy of the model whose output projections (and biases) are
zeroed by name (`reference.zeroed_projections`, written out per family; the library finds them by
tracing, never by name); span ablation against a model rebuilt without the blocks
(`reference.physically_deleted`). The shared-prefix engine's side is in tests/evaluate/test_shared.py.
"""

from __future__ import annotations

import copy
import json

import pytest
import torch
import transformers as tf
from factories import build_checkpoint, prune_spec, small_model
from reference import PROJECTIONS, physically_deleted, zeroed_projections

from layerprobe.core import ModelSpec, PruneSpec
from layerprobe.core.errors import LayerprobeError
from layerprobe.model.ablation import Ablation, Remover, ablated, locate_sublayers, removed_span
from layerprobe.model.load import load_model
from layerprobe.model.stack import find_layers
from layerprobe.prune.drop import run_prune_drop

FAMILIES = tuple(PROJECTIONS)


def _out(model, ids):
    with torch.no_grad():
        output = model(input_ids=ids)
    return output.last_hidden_state if hasattr(output, "last_hidden_state") else output.logits


IDS = torch.tensor([[5, 17, 33, 2, 90, 41, 7, 12, 64, 3]])


@pytest.mark.parametrize("family", FAMILIES)
def test_sublayer_ablation_equals_zeroed_output_projections(family):
    model = small_model(family)
    stack = find_layers(model)
    sublayers = locate_sublayers(model, stack)
    base = _out(model, IDS)
    block = 1  # a sparse (MoE) block in qwen2_moe, a sliding one in gemma2
    for unit in ("attention", "mlp"):
        want = _out(zeroed_projections(model, family, unit, block), IDS)
        with ablated(stack, unit, [block], sublayers):
            got = _out(model, IDS)
        torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-5)
        assert (got - base).abs().max() > 1e-3  # the ablation did something
    torch.testing.assert_close(_out(model, IDS), base, atol=0, rtol=0)  # and was undone


def test_sublayer_ablation_zeroes_every_expert_and_the_shared_one():
    model = small_model("qwen2_moe")
    stack = find_layers(model)
    sublayers = locate_sublayers(model, stack)
    assert sublayers[1].mlp.module == "mlp"  # the whole sparse block, not one expert
    # Zeroing only the routed experts is a different model: the shared expert matters.
    twin = copy.deepcopy(model)
    with torch.no_grad():
        for name, param in find_layers(twin).blocks[1].named_parameters():
            if name.startswith("mlp.experts.") and "down" in name:
                param.zero_()
    with ablated(stack, "mlp", [1], sublayers):
        got = _out(model, IDS)
    assert (got - _out(twin, IDS)).abs().max() > 1e-4


def test_remover_reports_module_paths_and_parallel_blocks():
    model = small_model("gpt_neox")
    remover = Remover.for_model(model, find_layers(model), "attention")
    assert remover.module_paths() == [{"attention": "attention", "mlp": "mlp"}] * 4
    assert all(s.parallel for s in remover.sublayers)
    encoder = small_model("bert")
    bert = Remover.for_model(encoder, find_layers(encoder), "mlp")
    assert all(not s.parallel for s in bert.sublayers)


@pytest.mark.parametrize("arch", ["llama", "deepseek_v3", "gpt2"])
def test_span_ablation_equals_physically_deleted_blocks(arch, tiny_checkpoints):
    path = tiny_checkpoints[arch]
    model = tf.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    stack = find_layers(model)
    ids = IDS % 300
    for start, n in ((0, 2), (1, 3), (2, 2)):
        want = _out(physically_deleted(path, arch, list(range(start, start + n))), ids)
        with removed_span(stack, start, n):
            got = _out(model, ids)
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
        with Remover(stack, Ablation("block", n)).variant(start):
            torch.testing.assert_close(_out(model, ids), want, atol=1e-5, rtol=1e-5)
    assert stack.num_layers == 4 and model.config.num_hidden_layers == 4


def test_ablation_options_are_validated():
    assert Ablation("block", 2).starts(4, [0, 1, 2, 3]) == [0, 1, 2]
    assert Ablation("attention").blocks(2) == [2]
    with pytest.raises(LayerprobeError, match="--unit"):
        Ablation("head")
    with pytest.raises(LayerprobeError, match="cannot be combined"):
        Ablation("mlp", 2)
    with pytest.raises(LayerprobeError, match="longer than"):
        Ablation("block", 5).starts(4, [0])
    with pytest.raises(LayerprobeError, match="--span"):
        PruneSpec(model=ModelSpec("x"), tasks=("t",), span=0)


# ------------------------------------------------------------------------------ prune-drop end to end
@pytest.mark.slow
def test_prune_drop_unit_and_span_engines_agree_and_record_settings(tiny_checkpoints, tmp_path):
    path = tiny_checkpoints["llama"]
    loaded = load_model(ModelSpec(str(path), device="cpu"), purpose="head")
    for unit, span in (("attention", 1), ("mlp", 1), ("block", 2)):
        results = {}
        for engine in ("simple", "shared"):
            spec = prune_spec(
                path,
                tasks=("lp_arc_like", "lp_pydoc_ppl"),
                layers=None,
                num_fewshot=None,
                engine=engine,
                unit=unit,
                span=span,
            )
            results[engine] = run_prune_drop(spec, tmp_path / f"{unit}{span}{engine}", loaded=loaded)
            assert results[engine].engine == engine
        simple, shared = results["simple"], results["shared"]
        assert simple.settings["layers"] == list(range(4 - span + 1))
        assert simple.settings["unit"] == unit and simple.settings["span"] == span
        for task in ("lp_arc_like", "lp_pydoc_ppl"):
            for metric, a in simple.tasks[task].metrics.items():
                b = shared.tasks[task].metrics[metric]
                assert b.pruned == pytest.approx(a.pruned, rel=1e-5), (unit, span, task, metric)
        ppl = simple.tasks["lp_pydoc_ppl"].metrics["word_perplexity"]
        assert all(abs(p / ppl.baseline - 1) > 1e-6 for p in ppl.pruned)
    written = json.loads((tmp_path / "attention1simple" / "prune_drop.json").read_text())
    assert written["settings"]["sublayers"][0] == {"attention": "self_attn", "mlp": "mlp"}


def test_deep_model_span_covers_every_start(tmp_path):
    path = build_checkpoint("llama", tmp_path / "llama6", num_layers=6)
    model = tf.AutoModelForCausalLM.from_pretrained(path).eval()
    stack = find_layers(model)
    assert Ablation("block", 3).starts(stack.num_layers, range(6)) == [0, 1, 2, 3]  # L − n + 1 variants
