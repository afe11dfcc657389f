"""Sublayer and span ablation (issue #11 items 1, 2) against independent references.

Sublayer ablation is checked against a copy of the model whose output projections (and biases) are
zeroed by name, written out here per family (the library finds them by tracing, never by name); span
ablation against a model rebuilt without the blocks (`reference.physically_deleted`). Both engines are
checked: the library context managers that the simple engine runs, and the shared-prefix engine's
log-likelihoods against the same references computed by hand.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch
import transformers as tf
from factories import build_checkpoint
from reference import physically_deleted
from typer.testing import CliRunner

from layerprobe.cli.app import app
from layerprobe.core import ModelSpec, PruneSpec
from layerprobe.core.errors import LayerprobeError
from layerprobe.model.ablation import Ablation, Remover, ablated, locate_sublayers, removed_span
from layerprobe.model.load import load_model
from layerprobe.model.stack import find_layers
from layerprobe.prune.drop import run_prune_drop

TASKS_DIR = Path(__file__).parents[1] / "data" / "tasks"
COMMON = dict(vocab_size=128, num_hidden_layers=4, max_position_embeddings=64, bos_token_id=1, eos_token_id=2)
ATTN = dict(hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2)
runner = CliRunner()


def _config(family: str):
    if family == "llama":  # dense Pre-LN
        return tf.LlamaConfig(**ATTN, **COMMON)
    if family == "qwen3":  # sliding window on blocks >= 2
        return tf.Qwen3Config(
            head_dim=8, use_sliding_window=True, sliding_window=3, max_window_layers=2, **ATTN, **COMMON
        )
    if family == "gemma2":  # alternating sliding / full attention, norms after each sublayer too
        return tf.Gemma2Config(head_dim=8, sliding_window=3, **ATTN, **COMMON)
    if family == "qwen2_moe":  # sparse blocks 1 and 3: routed experts + a gated shared expert
        return tf.Qwen2MoeConfig(
            moe_intermediate_size=16,
            shared_expert_intermediate_size=32,
            num_experts=4,
            num_experts_per_tok=2,
            decoder_sparse_step=2,
            **ATTN,
            **COMMON,
        )
    if family == "gpt_neox":  # parallel residual
        return tf.GPTNeoXConfig(hidden_size=32, intermediate_size=64, num_attention_heads=4, **COMMON)
    if family == "gpt2":  # Pre-LN with biases, Conv1D projections
        return tf.GPT2Config(n_layer=4, n_embd=32, n_head=4, n_positions=64, vocab_size=128)
    if family == "bert":  # Post-LN encoder
        return tf.BertConfig(hidden_size=32, intermediate_size=64, num_attention_heads=4, **COMMON)
    raise ValueError(family)


# The output projections of each family, by name: what "zeroing the sublayer's output projection" means.
PROJECTIONS = {
    "llama": ("self_attn.o_proj.", ("mlp.down_proj.",)),
    "qwen3": ("self_attn.o_proj.", ("mlp.down_proj.",)),
    "gemma2": ("self_attn.o_proj.", ("mlp.down_proj.",)),
    # every routed expert (fused or not) and the shared expert
    "qwen2_moe": ("self_attn.o_proj.", ("mlp.experts.down_proj", "mlp.experts.", "mlp.shared_expert.down_proj.")),
    "gpt_neox": ("attention.dense.", ("mlp.dense_4h_to_h.",)),
    "gpt2": ("attn.c_proj.", ("mlp.c_proj.",)),
    "bert": ("attention.output.dense.", ("output.dense.",)),
}
FAMILIES = tuple(PROJECTIONS)


def _is_projection(family: str, unit: str, name: str) -> bool:
    attention, mlp = PROJECTIONS[family]
    if unit == "attention":
        return name.startswith(attention)
    if family == "qwen2_moe" and name.startswith("mlp.experts."):
        return "down" in name  # fused or per-expert down projections
    return any(name.startswith(p) for p in mlp)


def _model(family: str, seed: int = 0):
    torch.manual_seed(seed)
    config = _config(family)
    model = tf.BertModel(config) if family == "bert" else tf.AutoModelForCausalLM.from_config(config)
    with torch.no_grad():  # random norm gains and biases, so that a skipped norm or bias would show
        for name, param in model.named_parameters():
            if "norm" in name.lower() or "ln" in name.split(".")[-2:][0]:
                param.uniform_(0.5, 1.5)
            elif name.endswith("bias"):
                param.normal_(0, 0.1)
    return model.eval()


def _out(model, ids):
    with torch.no_grad():
        output = model(input_ids=ids)
    return output.last_hidden_state if hasattr(output, "last_hidden_state") else output.logits


def _zeroed_copy(model, family: str, unit: str, block: int):
    """The reference: a deep copy whose `unit` output projection weights and biases in `block` are zero."""
    twin = copy.deepcopy(model)
    stack = find_layers(twin)
    zeroed = []
    with torch.no_grad():
        for name, param in stack.blocks[block].named_parameters():
            if _is_projection(family, unit, name):
                param.zero_()
                zeroed.append(name)
    assert zeroed, (family, unit)
    return twin


IDS = torch.tensor([[5, 17, 33, 2, 90, 41, 7, 12, 64, 3]])


@pytest.mark.parametrize("family", FAMILIES)
def test_sublayer_ablation_equals_zeroed_output_projections(family):
    model = _model(family)
    stack = find_layers(model)
    sublayers = locate_sublayers(model, stack)
    base = _out(model, IDS)
    block = 1  # a sparse (MoE) block in qwen2_moe, a sliding one in gemma2
    for unit in ("attention", "mlp"):
        want = _out(_zeroed_copy(model, family, unit, block), IDS)
        with ablated(stack, unit, [block], sublayers):
            got = _out(model, IDS)
        torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-5)
        assert (got - base).abs().max() > 1e-3  # the ablation did something
    torch.testing.assert_close(_out(model, IDS), base, atol=0, rtol=0)  # and was undone


def test_sublayer_ablation_zeroes_every_expert_and_the_shared_one():
    model = _model("qwen2_moe")
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
    model = _model("gpt_neox")
    remover = Remover.for_model(model, find_layers(model), "attention")
    assert remover.module_paths() == [{"attention": "attention", "mlp": "mlp"}] * 4
    assert all(s.parallel for s in remover.sublayers)
    encoder = _model("bert")
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


# ------------------------------------------------------------------ the shared-prefix engine, by hand
def _loglikelihood(model, context: list[int], continuation: list[int]) -> float:
    ids = torch.tensor([context + continuation])[:, :-1]
    with torch.no_grad():
        logprobs = model(input_ids=ids).logits[0].float().log_softmax(-1)
    positions = range(len(context) - 1, len(context) + len(continuation) - 1)
    return float(sum(logprobs[p, t] for p, t in zip(positions, continuation, strict=True)))


@pytest.mark.parametrize(
    ("family", "unit", "span"),
    [("llama", "attention", 1), ("qwen3", "mlp", 1), ("gpt_neox", "attention", 1), ("llama", "block", 2)],
)
def test_shared_engine_matches_references(family, unit, span, tiny_checkpoints):
    from layerprobe.evaluate.shared import SharedPrefixLM

    tokenizer = tf.AutoTokenizer.from_pretrained(tiny_checkpoints["llama"])
    model = _model(family, seed=3)
    stack = find_layers(model)
    remover = Remover.for_model(model, stack, unit, span)
    layers = remover.ablation.starts(4, range(4))
    lm = SharedPrefixLM(model, tokenizer, stack, layers, batch_size=2, remover=remover)
    requests = [
        (("a", "b"), [5, 17, 33, 2, 90], [41, 7]),
        (("c", "d"), [5, 17, 33], [2]),
        (("e", "f"), [9, 8, 7, 6, 5, 4, 3], [100, 101, 102]),
    ]
    for layer in [None, *layers]:
        lm.active = layer
        got = [ll for ll, _ in lm._loglikelihood_tokens(requests)]
        if layer is None:
            reference = model
        elif unit == "block":
            reference = copy.deepcopy(model)
            blocks = find_layers(reference).blocks
            for index in sorted(range(layer, layer + span), reverse=True):
                del blocks[index]
            for i, block in enumerate(blocks):  # KV-cache slots and per-layer lists follow the blocks
                block.self_attn.layer_idx = i
            reference.config.num_hidden_layers = len(blocks)
            if getattr(reference.config, "layer_types", None):
                reference.config.layer_types = [
                    t for i, t in enumerate(reference.config.layer_types) if not layer <= i < layer + span
                ]
        else:
            reference = _zeroed_copy(model, family, unit, layer)
        want = [_loglikelihood(reference, ctx, cont) for _, ctx, cont in requests]
        assert got == pytest.approx(want, rel=1e-5, abs=1e-5), (family, unit, layer)


# ------------------------------------------------------------------------------ prune-drop end to end
@pytest.mark.slow
def test_prune_drop_unit_and_span_engines_agree_and_record_settings(tiny_checkpoints, tmp_path):
    path = tiny_checkpoints["llama"]
    loaded = load_model(ModelSpec(str(path), device="cpu"), purpose="head")
    for unit, span in (("attention", 1), ("mlp", 1), ("block", 2)):
        results = {}
        for engine in ("simple", "shared"):
            spec = PruneSpec(
                model=ModelSpec(str(path), device="cpu"),
                tasks=("lp_arc_like", "lp_pydoc_ppl"),
                limit=3,
                batch_size=4,
                include_path=str(TASKS_DIR),
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


def test_cli_unit_and_span_errors_are_one_line(tiny_checkpoints, tmp_path):
    path = str(tiny_checkpoints["llama"])
    for extra, message in ((["--unit", "head"], "Unknown --unit"), (["--unit", "mlp", "--span", "2"], "--span")):
        result = runner.invoke(app, ["prune-drop", path, "--task", "lp_arc_like", *extra, "--out", str(tmp_path)])
        assert result.exit_code == 2, result.output
        assert message in result.output


def test_deep_model_span_covers_every_start(tmp_path):
    path = build_checkpoint("llama", tmp_path / "llama6", num_layers=6)
    model = tf.AutoModelForCausalLM.from_pretrained(path).eval()
    stack = find_layers(model)
    assert Ablation("block", 3).starts(stack.num_layers, range(6)) == [0, 1, 2, 3]  # L − n + 1 variants


def test_variant_label_names_what_was_removed():
    from layerprobe.results import variant_label

    assert variant_label({}) == "removed block"  # results written before --unit/--span
    assert variant_label({"unit": "attention", "span": 1}) == "attention removed (block)"
    assert variant_label({"unit": "block", "span": 3}) == "removed blocks l…l+2 (start l)"
