"""prune-drop: every ΔP is what lm-eval (or the SQuAD scorer) gives on a model saved without that block.

The references are independent of layerprobe's surgery: `reference.physically_deleted` builds a fresh
model from a config with L-1 layers and remapped weights, and lm-eval's own `simple_evaluate` scores it
from a fresh `HFLM` and freshly built tasks. Besides the metrics (accuracies hide small differences on
random tiny models), every request's log-likelihood is compared, so a wrong pass cannot hide behind a
coarse accuracy. Tasks are the local fixtures in tests/data/tasks; nothing touches the network.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import transformers as tf
from command_line import RESULT
from factories import (
    PRUNE_SETTINGS,
    RUN_SQUAD_PARAGRAPHS,
    TASKS,
    jamba_config,
    loaded_head,
    prune_spec,
    save_with_tokenizer,
    small_config,
    write_squad_json,
)
from reference import counted_block_rows, lm_eval_reference, load_without_block, physically_deleted
from watching import assert_same_answers, sample_responses

from layerprobe.core import BUILTIN_CORPUS, AngularSpec, CorpusSpec, ModelSpec, PruneSpec
from layerprobe.core.errors import TaskError
from layerprobe.data.squad import load_squad
from layerprobe.evaluate.squad import SquadScorer
from layerprobe.measure.angular import run_angular
from layerprobe.model.progress import Progress
from layerprobe.model.stack import find_layers
from layerprobe.prune.drop import run_prune_drop

CAUSAL = ("llama", "qwen3", "gpt2", "deepseek_v3")
# The default run checks one architecture end to end; the sweep over the others is marked slow.
CAUSAL_SWEEP = [CAUSAL[0], *(pytest.param(a, marks=pytest.mark.slow) for a in CAUSAL[1:])]
BATCH, LIMIT, FEWSHOT = PRUNE_SETTINGS["batch_size"], PRUNE_SETTINGS["limit"], PRUNE_SETTINGS["num_fewshot"]


def value_at(drop, layer):
    """A MetricDrop's value for one variant (None: the baseline)."""
    return drop.baseline if layer is None else drop.pruned[drop.layers.index(layer)]


def stderr_at(drop, layer):
    return drop.baseline_stderr if layer is None else drop.stderr[drop.layers.index(layer)]


# ------------------------------------------------------------------------------------ the references
def reference_metrics(results: dict, name: str) -> dict[str, tuple[float, float | None]]:
    """{metric: (value, stderr)} of one task or group, every metric lm-eval reports for it."""
    reported = results["results"][name]
    out = {}
    for key, value in reported.items():
        metric, _, filter_name = key.partition(",")
        if filter_name == "none" and not metric.endswith("_stderr"):
            stderr = reported[f"{metric}_stderr,none"]
            out[metric] = (float(value), None if stderr == "N/A" else float(stderr))
    return out


def assert_metric_equal(metric: str, got: float, want: float) -> None:
    if metric.startswith("acc"):  # accuracies: identical
        assert got == want, metric
    else:  # log-likelihood derived (perplexities, bits per byte)
        assert got == pytest.approx(want, rel=1e-5), metric


# ----------------------------------------------------------- 1. equal to delete-and-evaluate, per engine
@pytest.mark.parametrize("arch", CAUSAL_SWEEP)
@pytest.mark.slow
def test_prune_drop_equals_lm_eval_on_a_physically_deleted_model(arch, tiny_checkpoints, tmp_path, spy):
    path = tiny_checkpoints[arch]
    loaded = loaded_head(path)
    layers = [0, 1, 3]  # the first, a middle and the last block
    results, answers = {}, {}
    for engine in ("simple", "shared"):
        spy.reset()
        with counted_block_rows(find_layers(loaded.model).blocks) as hooked:
            results[engine] = run_prune_drop(
                prune_spec(path, layers="0,1,3", engine=engine), tmp_path / engine, loaded=loaded, progress=spy.progress
            )
        answers[engine] = dict(spy.answers)
        # Progress saw every block pass of the evaluations (the shared engine's head checks come before).
        assert 0 < spy.block_rows <= hooked["count"]
        if engine == "simple":
            assert spy.block_rows == hooked["count"]
        assert results[engine].engine == engine
        assert json.loads((tmp_path / engine / RESULT).read_text())["engine"] == engine
        assert results[engine].tasks["lp_mmlu"].num_fewshot == FEWSHOT

    tokenizer = tf.AutoTokenizer.from_pretrained(path)
    for variant in (None, *layers):
        if variant is None:  # the untouched checkpoint, loaded afresh
            model = tf.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
        else:
            model = physically_deleted(path, arch, variant)
        reference = lm_eval_reference(model, tokenizer, TASKS, limit=LIMIT, num_fewshot=FEWSHOT, log_samples=True)
        want_answers = sample_responses(reference["samples"])
        for engine, result in results.items():
            for task in TASKS:
                want = reference_metrics(reference, task)
                got = result.tasks[task].metrics
                assert list(got) == list(want), (engine, task)  # every metric lm-eval reports, in its order
                for metric, (value, stderr) in want.items():
                    assert_metric_equal(metric, value_at(got[metric], variant), value)
                    if stderr is None:
                        assert stderr_at(got[metric], variant) is None
                    else:
                        assert stderr_at(got[metric], variant) == pytest.approx(stderr, rel=1e-5)
                members = {
                    key: v
                    for key, v in want_answers.items()
                    if key[0] in (("lp_mmlu_stem", "lp_mmlu_humanities") if task == "lp_mmlu" else (task,))
                }
                assert_same_answers(answers[engine][(task, variant)], members)
    # The removal really changed the model (a check that compares a model with itself proves nothing).
    ppl = results["simple"].tasks["lp_pydoc_ppl"].metrics["word_perplexity"]
    assert all(abs(p / ppl.baseline - 1) > 1e-4 for p in ppl.pruned)
    # The in-memory surgery left the model as it was.
    assert find_layers(loaded.model).num_layers == 4 and loaded.model.config.num_hidden_layers == 4


# ------------------------------------------------------------------------ 2. the engine auto picks
def test_engine_auto_falls_back_to_simple_for_generation_and_shared_refuses(
    tiny_checkpoints, tmp_path, spy, tasks_with_generation
):
    path = tiny_checkpoints["llama"]
    loaded = loaded_head(path)
    spec = prune_spec(
        path,
        tasks=("lp_arc_like", "lp_gen"),
        layers="3",
        limit=2,
        num_fewshot=None,
        include_path=str(tasks_with_generation),
        engine="auto",
    )
    result = run_prune_drop(spec, tmp_path / "auto", loaded=loaded, progress=spy.progress)
    assert result.engine == "simple" and [s.engine for s in spy.scorers] == ["simple"]
    assert spy.notes == [  # one line says why the shared engine is not used
        "simple engine (one full evaluation per variant), not the shared-prefix one: task lp_gen generates text "
        "(only loglikelihood-type tasks share prefixes)"
    ]
    assert json.loads((tmp_path / "auto" / RESULT).read_text())["engine"] == "simple"
    assert list(result.tasks["lp_gen"].metrics) == ["exact_match"]
    # Without a generation task, auto picks the shared engine.
    assert (
        run_prune_drop(
            prune_spec(path, tasks=("lp_arc_like",), layers="3", limit=2, engine="auto"),
            tmp_path / "auto2",
            loaded=loaded,
        ).engine
        == "shared"
    )

    shared = prune_spec(
        path, tasks=("lp_gen",), layers="3", limit=2, include_path=str(tasks_with_generation), engine="shared"
    )
    with pytest.raises(TaskError, match="--engine shared cannot score this run: task lp_gen generates text"):
        run_prune_drop(shared, tmp_path / "shared", loaded=loaded)
    assert not (tmp_path / "shared" / RESULT).exists()


# ------------------------------------------------------------------------------------------- 3. SQuAD
@pytest.fixture(scope="module")
def squad_file(tmp_path_factory) -> Path:
    return write_squad_json(tmp_path_factory.mktemp("squad") / "dev-v1.1.json", RUN_SQUAD_PARAGRAPHS)


def test_squad_equals_the_scorer_on_a_physically_deleted_qa_model(tiny_checkpoints, squad_file, tmp_path, spy):
    path = tiny_checkpoints["bert_qa"]
    spec = PruneSpec(
        model=ModelSpec(str(path), device="cpu"), tasks=("squad",), squad_data=str(squad_file), batch_size=BATCH
    )
    result = run_prune_drop(spec, tmp_path, progress=spy.progress)
    assert result.engine == "simple" and result.model.kind == "extractive-qa"
    task = result.tasks["squad"]
    assert list(task.metrics) == ["f1", "exact_match"] and task.samples == 6
    examples = load_squad(squad_file)
    tokenizer = tf.AutoTokenizer.from_pretrained(path)
    L = 4
    assert task.metrics["f1"].layers == list(range(L))
    for variant in (None, *range(L)):
        if variant is None:
            model = tf.AutoModelForQuestionAnswering.from_pretrained(path, dtype=torch.float32).eval()
        else:
            model = physically_deleted(path, "bert_qa", variant)
            assert model.config.num_hidden_layers == L - 1
        scorer = SquadScorer(model, tokenizer, examples, max_length=256, doc_stride=128, batch_size=BATCH)
        want = scorer()
        assert spy.answers[("squad", variant)] == want.predictions, variant
        for metric, score in want.metrics.items():
            assert value_at(task.metrics[metric], variant) == score.value, (metric, variant)
            assert stderr_at(task.metrics[metric], variant) == score.stderr
    assert any(spy.answers[("squad", l)] != spy.answers[("squad", None)] for l in range(L))
    # The bar moves batch by batch: one advance per batch of windows, adding up to one per evaluation.
    batches = -(-scorer.num_windows // BATCH)
    assert batches > 1 and len(spy.advances) == (L + 1) * batches
    assert sum(spy.advances) == pytest.approx(L + 1)


# ------------------------------------------------------------------- architectures at the edges
@pytest.mark.slow  # over 2.5 s on 2 cores: the default tier stays under 3 minutes
def test_jamba_prune_drop_equals_lm_eval_on_a_physically_rebuilt_model(tmp_path, spy):
    """Both engines on Jamba (derived layer pattern) against lm-eval on a five-block Jamba built from its config.

    Six blocks with attention and experts at 1 and 4 (period 3, offset 1); without block 2 that is a
    five-block Jamba with period 2, offset 1. The simple engine crashed here when the pattern realigned.
    """
    torch.manual_seed(0)
    model = tf.JambaForCausalLM(jamba_config(6, 3, 1)).eval()
    path = save_with_tokenizer(model, tmp_path / "jamba")
    reference = load_without_block(model, tf.JambaForCausalLM(jamba_config(5, 2, 1)).eval(), 2)
    loaded = loaded_head(path)
    tasks = ("lp_arc_like",)
    tokenizer = tf.AutoTokenizer.from_pretrained(path)
    want = lm_eval_reference(reference, tokenizer, tasks, limit=LIMIT, num_fewshot=FEWSHOT, log_samples=True)
    want_answers = sample_responses(want["samples"])
    for engine in ("simple", "shared"):
        spy.reset()
        result = run_prune_drop(
            prune_spec(path, tasks=tasks, layers="2", engine=engine),
            tmp_path / engine,
            loaded=loaded,
            progress=spy.progress,
        )
        assert result.engine == engine and result.model.layer_path == "layers"
        for metric, (value, _stderr) in reference_metrics(want, "lp_arc_like").items():
            assert_metric_equal(metric, value_at(result.tasks["lp_arc_like"].metrics[metric], 2), value)
        assert_same_answers(spy.answers[("lp_arc_like", 2)], want_answers)
    assert loaded.model.config.num_hidden_layers == 6 and type(loaded.model.config) is tf.JambaConfig


def test_llama4_text_uses_the_shared_engine_and_reports_the_angular_layer_path(tmp_path, spy):
    torch.manual_seed(0)
    config = small_config("llama4_text", vocab_size=512, positions=256)
    path = save_with_tokenizer(tf.Llama4ForCausalLM(config).eval(), tmp_path / "llama4")
    angular = run_angular(
        AngularSpec(ModelSpec(str(path), device="cpu"), CorpusSpec("builtin:pydoc", tokens=256, seq_len=64))
    )
    tasks = ("lp_arc_like",)
    loaded = loaded_head(path)
    results = {}
    for engine in ("auto", "simple"):
        spy.reset()
        results[engine] = run_prune_drop(
            prune_spec(path, tasks=tasks, layers="1,3", engine=engine),
            tmp_path / engine,
            loaded=loaded,
            progress=spy.progress,
        )
        assert results[engine].model.layer_path == angular.model.layer_path == "layers"
        assert results[engine].model.num_layers == angular.model.num_layers == 4
        results[engine] = (results[engine], dict(spy.answers))
    assert results["auto"][0].engine == "shared" and results["simple"][0].engine == "simple"
    for variant in (None, 1, 3):
        assert_same_answers(
            results["auto"][1][("lp_arc_like", variant)], results["simple"][1][("lp_arc_like", variant)]
        )
    assert loaded.model.config.num_hidden_layers == 4


def test_corpus_task_with_a_span_and_a_sublayer_unit_and_starts_that_cannot_hold_a_span(tiny_checkpoints, tmp_path):
    path = tiny_checkpoints["llama"]
    loaded = loaded_head(path)
    corpus = CorpusSpec(BUILTIN_CORPUS, tokens=72, seq_len=16)
    notes: list[str] = []
    spans = run_prune_drop(
        prune_spec(path, tasks=("corpus",), layers="0,2,3", span=3, corpus=corpus, engine="auto"),
        tmp_path / "span",
        loaded=loaded,
        progress=Progress(on_note=notes.append),
    )
    assert notes[0].startswith("corpus metric: next-token (LlamaForCausalLM is a causal LM")
    assert notes[1:] == ["--span 3: start(s) 2, 3 cannot hold 3 blocks inside the model's 4 (l ≤ 1); left out."]
    kl = spans.tasks["corpus"].metrics["kl"]
    assert spans.settings["span"] == 3 and kl.layers == [0] and kl.pruned[0] > 1e-4
    attention = run_prune_drop(
        prune_spec(path, tasks=("corpus",), layers="1", unit="attention", corpus=corpus),
        tmp_path / "attention",
        loaded=loaded,
    )
    assert attention.settings["unit"] == "attention" and attention.tasks["corpus"].metrics["kl"].pruned[0] > 1e-4
    # Different ablations of one block give different scores (a span or a sublayer is not block 1 alone).
    block = run_prune_drop(
        prune_spec(path, tasks=("corpus",), layers="1", corpus=corpus), tmp_path / "b", loaded=loaded
    )
    assert block.tasks["corpus"].metrics["kl"].pruned[0] != attention.tasks["corpus"].metrics["kl"].pruned[0]
