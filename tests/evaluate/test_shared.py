"""The shared-prefix engine: the simple engine's answers (lm-eval's own path) with less block work.

Its log-likelihoods are held against references computed by hand on models without the removed part
(physically deleted blocks, zeroed output projections), also when accelerate spreads the blocks over
devices and disk, and its scores against the simple engine's.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch
import transformers as tf
from command_line import RESULT, invoke
from factories import (
    TASKS,
    TASKS_DIR,
    build_checkpoint,
    loaded_head,
    offload_args,
    prune_spec,
    small_model,
)
from reference import continuation_loglikelihood, counted_block_rows, physically_deleted, zeroed_projections
from watching import assert_same_answers

from layerprobe.core import ModelSpec, parse_model_args
from layerprobe.evaluate.shared import SharedPrefixLM
from layerprobe.model import load_model
from layerprobe.model.ablation import Remover
from layerprobe.model.stack import find_layers
from layerprobe.prune.drop import run_prune_drop
from layerprobe.results import PruneDropResult


@pytest.mark.parametrize(
    ("family", "unit", "span"),
    [("llama", "attention", 1), ("qwen3", "mlp", 1), ("gpt_neox", "attention", 1), ("llama", "block", 2)],
)
def test_shared_engine_matches_references(family, unit, span, tiny_checkpoints):
    tokenizer = tf.AutoTokenizer.from_pretrained(tiny_checkpoints["llama"])
    model = small_model(family, seed=3)
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
            reference = zeroed_projections(model, family, unit, layer)
        want = [continuation_loglikelihood(reference, ctx, cont) for _, ctx, cont in requests]
        assert got == pytest.approx(want, rel=1e-5, abs=1e-5), (family, unit, layer)


def test_shared_engine_on_offloaded_blocks_matches_physically_deleted_models(tiny_checkpoints, tmp_path):
    """Hooks on every block, two blocks' weights on disk: every variant's log-likelihoods are a fresh
    model's without that block (reference: weights remapped into an (L-1)-layer model, no hooks)."""
    path = tiny_checkpoints["llama"]
    spec = ModelSpec(str(path), device_map="auto", dtype="float32", model_args=parse_model_args(offload_args(tmp_path)))
    loaded = load_model(spec, purpose="head")
    stack = find_layers(loaded.model)
    assert any(next(b.parameters()).device.type == "meta" for b in stack.blocks)
    layers = [0, 2, 3]
    lm = SharedPrefixLM(loaded.model, loaded.tokenizer, stack, layers, batch_size=2)
    encode = loaded.tokenizer.encode
    pairs = [
        (encode("The quick brown fox"), encode(" jumps over")),
        (encode("import os"), encode(" and sys")),
        (encode("A list is a mutable sequence of"), encode(" items")),
    ]
    requests = [(None, context, continuation) for context, continuation in pairs]
    for layer in [None, *layers]:
        lm.active = layer
        got = [ll for ll, _ in lm._loglikelihood_tokens(requests)]
        reference = (
            tf.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
            if layer is None
            else physically_deleted(path, "llama", layer)
        )
        want = [continuation_loglikelihood(reference, c, t) for c, t in pairs]
        assert got == pytest.approx(want, abs=1e-4), layer


def _prune(args: list[str], out: Path):
    result = invoke(
        "prune-drop", *args, "--task", "lp_pydoc_ppl", "--include-path", TASKS_DIR, "--limit", "2", "--num-fewshot",
        "1", "--batch-size", "4", "--layers", "0,2,3", "--dtype", "float32", "--quiet", "--out", out,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    return PruneDropResult.from_dict(json.loads((out / "prune_drop.json").read_text()))


def _assert_same_scores(got: PruneDropResult, want: PruneDropResult) -> None:
    assert got.tasks.keys() == want.tasks.keys()
    for name, task in want.tasks.items():
        for metric, drop in task.metrics.items():
            other = got.tasks[name].metrics[metric]
            assert other.layers == drop.layers
            assert other.baseline == pytest.approx(drop.baseline, rel=1e-5, abs=1e-6), (name, metric)
            assert other.pruned == pytest.approx(drop.pruned, rel=1e-5, abs=1e-6), (name, metric)


@pytest.mark.slow
def test_shared_engine_under_device_map_equals_simple_engine(tiny_checkpoints, tmp_path):
    model = str(tiny_checkpoints["llama"])
    simple = _prune([model, "--engine", "simple", "--device", "cpu"], tmp_path / "simple")
    shared = _prune(
        [model, "--engine", "shared", "--device-map", "auto", "--model-args", offload_args(tmp_path)],
        tmp_path / "shared",
    )
    assert simple.engine == "simple" and shared.engine == "shared"  # not switched off by --device-map
    assert shared.run.device == "device_map=auto"
    assert shared.model.model_args["offload_folder"] == str(tmp_path / "offload")
    _assert_same_scores(shared, simple)


def test_shared_engine_state_bound_splits_batches_with_same_scores(tiny_checkpoints, tmp_path):
    """--max-state-memory bounds the recorded states: with room for one row, every baseline pass is one row."""
    model = str(tiny_checkpoints["llama"])
    rows_seen: list[int] = []
    loaded = load_model(ModelSpec(model, device="cpu", dtype="float32"), purpose="head")
    handle = (
        find_layers(loaded.model)
        .blocks[0]
        .register_forward_pre_hook(lambda _m, args: rows_seen.append(int(args[0].shape[0])))
    )

    def spec(**extra):
        return prune_spec(
            model, dtype="float32", tasks=("lp_pydoc_ppl",), limit=2, num_fewshot=None, engine="shared", **extra
        )

    try:
        free = run_prune_drop(spec(), tmp_path / "free", loaded=loaded)
        assert max(rows_seen) > 1
        rows_seen.clear()
        bounded = run_prune_drop(spec(max_state_bytes=1), tmp_path / "bounded", loaded=loaded)
    finally:
        handle.remove()
    assert rows_seen and max(rows_seen) == 1
    assert bounded.settings["max_state_bytes"] == 1
    _assert_same_scores(bounded, free)


# --------------------------------------------------------------------------------- the engines agree
@pytest.fixture(scope="module")
def deep_llama(tmp_path_factory) -> Path:
    return build_checkpoint("llama", tmp_path_factory.mktemp("deep") / "llama8", num_layers=8)


@pytest.mark.slow
def test_engines_agree_on_an_8_layer_model_and_the_shared_one_does_less_work(deep_llama, tmp_path, spy):
    loaded = loaded_head(deep_llama)
    blocks = list(find_layers(loaded.model).blocks)
    L = len(blocks)
    assert L == 8
    results, answers, hooked, reported = {}, {}, {}, {}
    with counted_block_rows(blocks) as rows:
        for engine in ("simple", "shared"):
            spy.reset()
            rows["count"] = 0
            # Without prefix reuse, so that the block work follows the plain engine's theory (reuse has its
            # own tests in test_prefix_cache.py).
            results[engine] = run_prune_drop(
                prune_spec(deep_llama, layers=None, engine=engine, prefix_reuse=False),
                tmp_path / engine,
                loaded=loaded,
                progress=spy.progress,
            )
            hooked[engine], answers[engine], reported[engine] = rows["count"], dict(spy.answers), spy.block_rows
            assert results[engine].engine == engine
            assert json.loads((tmp_path / engine / RESULT).read_text())["engine"] == engine
            (scorer,) = spy.scorers
            assert scorer.engine == engine

    simple, shared = results["simple"], results["shared"]
    assert list(simple.tasks) == list(shared.tasks) == list(TASKS)
    for task in TASKS:
        assert list(simple.tasks[task].metrics) == list(shared.tasks[task].metrics)
        for metric, a in simple.tasks[task].metrics.items():
            b = shared.tasks[task].metrics[metric]
            assert a.layers == b.layers == list(range(L))
            assert b.baseline == pytest.approx(a.baseline, rel=1e-5)
            assert b.pruned == pytest.approx(a.pruned, rel=1e-5)
            # ΔP is a difference of two such values: its error is relative to them, not to itself.
            assert b.delta == pytest.approx(a.delta, abs=2e-5 * max(map(abs, [a.baseline, *a.pruned])))
    assert answers["simple"].keys() == answers["shared"].keys()
    for key, want in answers["simple"].items():
        assert_same_answers(answers["shared"][key], want)

    # The shared engine ran, and did less block work: per batch row, the simple engine runs L blocks for
    # the baseline and L-1 per variant (L²); the shared one L for the baseline and L-1-l after each
    # recorded x^l (L(L+1)/2), a ratio of (L+1)/(2L).
    # Progress reports every block pass of the evaluations: all of them for the simple engine; for the
    # shared one all but the two one-row head checks made before evaluating (L rows each).
    assert reported["simple"] == hooked["simple"]
    assert 0 < reported["shared"] < hooked["simple"]
    assert reported["shared"] <= hooked["shared"] <= reported["shared"] + 2 * L
    # (The one-row probe of the blocks' output arity adds L rows to the shared count.)
    assert (reported["shared"] - L) / reported["simple"] == pytest.approx((L + 1) / (2 * L), rel=0.01)
