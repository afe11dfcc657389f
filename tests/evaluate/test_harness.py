"""lm-eval harness wrapper: same numbers as lm_eval.simple_evaluate, and no state leaking between variants.

Tasks are local fixtures (tests/data/tasks: MMLU-shaped group of two subjects, ARC-shaped task, pydoc
perplexity), scored by the tiny random checkpoints; nothing is downloaded.
"""

from __future__ import annotations

import contextlib
import copy
import io
import logging
import math
import sys
import types

import pytest
import torch
import transformers as tf
from factories import TASKS, TASKS_DIR, offload_args
from reference import lm_eval_reference

from layerprobe.core import ModelSpec, parse_model_args
from layerprobe.evaluate.harness import evaluate, make_lm, task_scores
from layerprobe.evaluate.lm_eval_globals import quiet_lm_eval
from layerprobe.evaluate.tasks import build_tasks
from layerprobe.model import load_model

NAMES = list(TASKS)
BATCH = 4


def _load(path):
    model = tf.AutoModelForCausalLM.from_pretrained(path).eval()
    return model, tf.AutoTokenizer.from_pretrained(path)


@pytest.fixture(scope="module")
def task_set():
    return build_tasks(NAMES, include_path=TASKS_DIR)


@pytest.fixture(scope="module")
def models(tiny_checkpoints):
    return {arch: _load(tiny_checkpoints[arch]) for arch in ("llama", "gpt2", "qwen3")}


def _flat(scores):
    """{name: TaskScores} → {name: {metric: (value, stderr, higher_is_better)}} over groups and subtasks."""
    out = {}
    for name, task in scores.items():
        out[name] = {m: (s.value, s.stderr, s.higher_is_better) for m, s in task.metrics.items()}
        out.update(_flat(task.subtasks))
    return out


def _lm_eval_flat(results):
    out = {}
    for name, reported in results["results"].items():
        out[name] = {}
        for key, value in reported.items():
            metric, _, filter_name = key.partition(",")
            if filter_name and not metric.endswith("_stderr") and key != "sample_count":
                stderr = reported[f"{metric}_stderr,{filter_name}"]
                out[name][metric] = (
                    value,
                    None if stderr == "N/A" else stderr,
                    results["higher_is_better"][name][metric],
                )
    return out


def _requests(task_set):
    return {name: [inst.args for inst in task.instances] for name, task in task_set.tasks.items()}


# ----------------------------------------------------------------------------------------- scoring


def test_a_model_offloaded_whole_scores_like_one_in_memory(task_set, models, tiny_checkpoints, tmp_path):
    """--device-map with every weight on disk: HFLM would take "meta" as its device and fail in autocast."""
    args = parse_model_args(offload_args(tmp_path, cpu_bytes="1KB"))
    spec = ModelSpec(str(tiny_checkpoints["llama"]), device_map="auto", dtype="float32", model_args=args)
    loaded = load_model(spec, purpose="head")
    assert set(loaded.model.hf_device_map.values()) == {"disk"} and loaded.model.device.type == "meta"
    lm = make_lm(loaded.model, loaded.tokenizer, batch_size=BATCH)
    assert lm.device == torch.device("cpu")  # where the embedding computes, not "meta"
    ours = evaluate(lm, task_set, limit=4)["lp_arc_like"]
    model, tokenizer = models["llama"]
    in_memory = evaluate(make_lm(model, tokenizer, batch_size=BATCH), task_set, limit=4)["lp_arc_like"]
    assert {m: s.value for m, s in ours.metrics.items()} == pytest.approx(
        {m: s.value for m, s in in_memory.metrics.items()}, abs=1e-12
    )


@pytest.mark.slow  # over 2.5 s on 2 cores: the default tier stays under 3 minutes
@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_evaluate_equals_simple_evaluate(task_set, models, arch):
    model, tokenizer = models[arch]
    ours = evaluate(make_lm(model, tokenizer, batch_size=BATCH), task_set)
    theirs = lm_eval_reference(model, tokenizer, NAMES, batch_size=BATCH, log_samples=False)
    assert _flat(ours) == _lm_eval_flat(theirs)  # every metric lm-eval reports, exactly, stderr included
    assert list(ours["lp_arc_like"].metrics) == ["acc", "acc_norm"]
    assert list(ours["lp_pydoc_ppl"].metrics) == ["word_perplexity", "byte_perplexity", "bits_per_byte"]
    assert ours["lp_pydoc_ppl"].metrics["bits_per_byte"].stderr is None  # lm-eval: "N/A"
    assert ours["lp_pydoc_ppl"].metrics["bits_per_byte"].higher_is_better is False
    assert [ours[n].samples for n in NAMES] == [30, 15, 10]
    assert all(ours[n].num_fewshot == 0 for n in NAMES)
    for scores in _flat(ours).values():
        assert all(math.isfinite(value) for value, _, _ in scores.values())


def test_group_reports_size_weighted_aggregate(task_set, models):
    model, tokenizer = models["llama"]
    group = evaluate(make_lm(model, tokenizer, batch_size=BATCH), task_set)["lp_mmlu"]
    stem, humanities = group.subtasks["lp_mmlu_stem"], group.subtasks["lp_mmlu_humanities"]
    assert (stem.samples, humanities.samples, group.samples) == (20, 10, 30)
    expected = (20 * stem.metrics["acc"].value + 10 * humanities.metrics["acc"].value) / 30
    assert group.metrics["acc"].value == pytest.approx(expected, abs=1e-12)
    assert group.metrics["acc"].samples == 30 and group.metrics["acc"].stderr > 0
    assert list(group.metrics) == ["acc"]


@pytest.mark.slow
def test_lm_eval_mmlu_group_structure_offline(models, monkeypatch):
    """The real `mmlu` group (4 subgroups, 57 subjects) on stand-in data: datasets.load_dataset is faked."""
    import datasets

    def fake_mmlu(path, name=None, **kwargs):
        assert path == "cais/mmlu"
        rows = [
            {
                "question": f"Question {i} on {name}?",
                "choices": ["one", "two", "three", "four"],
                "answer": (i + len(name)) % 4,
                "subject": name,
            }
            for i in range(5)
        ]
        return datasets.DatasetDict(
            {"test": datasets.Dataset.from_list(rows[:2]), "dev": datasets.Dataset.from_list(rows)}
        )

    monkeypatch.setattr(datasets, "load_dataset", fake_mmlu)
    # With the include path of the test above, lm-eval's whole index is already built (cached per process).
    ts = build_tasks(["mmlu"], include_path=TASKS_DIR, num_fewshot=1)
    assert len(ts.members["mmlu"]) == 57
    subgroups = ["mmlu_stem", "mmlu_other", "mmlu_social_sciences", "mmlu_humanities"]
    assert ts.loaded["group_map"]["mmlu"] == subgroups
    model, tokenizer = models["llama"]
    mmlu = evaluate(make_lm(model, tokenizer, batch_size=BATCH), ts, limit=1, bootstrap_iters=0)["mmlu"]
    leaves = {name: leaf for sub in mmlu.subtasks.values() for name, leaf in sub.subtasks.items()}
    assert len(leaves) == 57 and mmlu.samples == 57
    expected = sum(leaf.metrics["acc"].value for leaf in leaves.values()) / 57  # one document each
    assert mmlu.metrics["acc"].value == pytest.approx(expected, abs=1e-12)
    assert mmlu.metrics["acc"].higher_is_better is True and mmlu.num_fewshot == 1  # lm-eval omits both
    context = ts.tasks["mmlu_astronomy"].instances[0].args[0]
    assert context.startswith("The following are multiple choice questions (with answers) about astronomy.")
    assert "Question 0 on astronomy?" in context and context.count("Answer:") == 2  # first_n shot + question


def test_repeated_calls_see_the_same_requests_and_give_the_same_results(task_set, models):
    model, tokenizer = models["gpt2"]
    lm = make_lm(model, tokenizer, batch_size=BATCH)
    first, first_requests = evaluate(lm, task_set), _requests(task_set)
    torch.manual_seed(99)  # disturb every global RNG between calls: evaluate re-seeds them
    __import__("random").seed(99)
    second, second_requests = evaluate(lm, task_set), _requests(task_set)
    assert first == second
    assert first_requests == second_requests


@pytest.mark.slow  # over 3 s on 2 cores: the default tier stays under 3 minutes
def test_fewshot_contexts_identical_across_calls_and_equal_to_simple_evaluate(models):
    model, tokenizer = models["llama"]
    names = ["lp_arc_like", "lp_mmlu_stem"]
    ts = build_tasks(names, include_path=TASKS_DIR, num_fewshot=2)
    lm = make_lm(model, tokenizer, batch_size=BATCH)

    def contexts():
        return {name: [inst.args[0] for inst in task.instances] for name, task in ts.tasks.items()}

    first, first_contexts = evaluate(lm, ts), contexts()
    evaluate(lm, ts, seed=7)
    other_seed = contexts()
    second, second_contexts = evaluate(lm, ts), contexts()
    assert first == second and first_contexts == second_contexts
    arc = first_contexts["lp_arc_like"]
    assert all(ctx.count("Question:") == 3 for ctx in arc)  # two shots, then the question
    assert len(set(ctx.split("Question:")[1] for ctx in arc)) > 1  # a seeded *random* sampler
    assert other_seed["lp_arc_like"] != arc and other_seed["lp_mmlu_stem"] == first_contexts["lp_mmlu_stem"]
    assert all(ctx.count("Answer:") == 3 for ctx in first_contexts["lp_mmlu_stem"])  # MMLU: first_n
    assert first["lp_arc_like"].num_fewshot == 2
    theirs = lm_eval_reference(model, tokenizer, names, batch_size=BATCH, num_fewshot=2, log_samples=True)
    for name in names:
        assert [s["arguments"][0][0] for s in theirs["samples"][name]] == first_contexts[name][::4]
    assert _flat(first) == _lm_eval_flat(theirs)


def test_evaluate_is_quiet_and_restores_logging(task_set, models, capfd, caplog):
    import tqdm

    model, tokenizer = models["llama"]
    capfd.readouterr()
    with caplog.at_level(logging.INFO, logger="lm_eval"):
        evaluate(make_lm(model, tokenizer, batch_size=BATCH), task_set)
        assert logging.getLogger("lm_eval").level == logging.INFO  # restored
    assert not [record for record in caplog.records if record.name.startswith("lm_eval")]
    assert capfd.readouterr() == ("", "")  # no tqdm bars, no prints
    with quiet_lm_eval():
        assert tqdm.tqdm(range(3)).disable and tqdm.tqdm(range(3), disable=False).disable
    assert not tqdm.tqdm(range(3), file=io.StringIO()).disable


# --------------------------------------------------------------------- one HFLM across model variants


@contextlib.contextmanager
def removed_block(model, index):
    """Take block `index` out of the model's ModuleList in place (as prune-drop does), then put it back."""
    owner, attr = (model.transformer, "h") if hasattr(model, "transformer") else (model.model, "layers")
    blocks, config = getattr(owner, attr), model.config
    layer_types = list(getattr(config, "layer_types", None) or [])
    saved = {m: m.layer_idx for m in blocks.modules() if hasattr(m, "layer_idx")}
    kept = [block for i, block in enumerate(blocks) if i != index]
    setattr(owner, attr, torch.nn.ModuleList(kept))
    for new_index, block in enumerate(kept):
        for module in block.modules():
            if hasattr(module, "layer_idx"):
                module.layer_idx = new_index
    config.num_hidden_layers = len(kept)
    if layer_types:
        config.layer_types = [kind for i, kind in enumerate(layer_types) if i != index]
    try:
        yield model
    finally:
        setattr(owner, attr, blocks)
        for module, layer_idx in saved.items():
            module.layer_idx = layer_idx
        config.num_hidden_layers = len(blocks)
        if layer_types:
            config.layer_types = layer_types


@pytest.mark.parametrize("arch", ["llama", "gpt2", "qwen3"])
@pytest.mark.slow  # over 3 s on 2 cores: the default tier stays under 3 minutes
def test_one_hflm_reused_across_variants_matches_a_fresh_hflm(task_set, models, arch):
    model, tokenizer = models[arch]
    lm = make_lm(model, tokenizer, batch_size=BATCH)
    baseline = evaluate(lm, task_set)
    pruned_copy = copy.deepcopy(model)
    with removed_block(pruned_copy, 1):
        assert len(getattr(pruned_copy.config, "layer_types", None) or [0] * 3) == 3
        fresh = evaluate(make_lm(pruned_copy, tokenizer, batch_size=BATCH), task_set)
    with removed_block(model, 1):
        reused = evaluate(lm, task_set)  # the same HFLM object, now wrapping a 3-block model
    restored = evaluate(lm, task_set)
    assert _flat(reused) == _flat(fresh)
    ppl = "lp_pydoc_ppl"
    assert reused[ppl].metrics["bits_per_byte"].value != baseline[ppl].metrics["bits_per_byte"].value
    assert _flat(restored) == _flat(baseline)


def test_a_response_cache_would_hand_the_variant_the_baseline_answers(task_set, models, monkeypatch):
    """Why evaluate refuses CachingLM: lm-eval's response cache is keyed by the request, not by the model."""
    from lm_eval.api.model import CachingLM
    from lm_eval.evaluator import evaluate as lm_eval_evaluate

    class MemoryDict(dict):  # sqlitedict's SqliteDict, in memory (sqlitedict is not a dependency)
        def __init__(self, *args, **kwargs):
            super().__init__()

        def commit(self):
            pass

    monkeypatch.setitem(sys.modules, "sqlitedict", types.SimpleNamespace(SqliteDict=MemoryDict))
    model, tokenizer = models["llama"]
    cached = CachingLM(make_lm(model, tokenizer, batch_size=BATCH), "cache.db")
    with pytest.raises(TypeError, match="CachingLM"):
        evaluate(cached, task_set)
    loaded = {"tasks": {"lp_pydoc_ppl": task_set.tasks["lp_pydoc_ppl"]}, "groups": {}, "group_map": {}}

    def cached_bits_per_byte():
        with quiet_lm_eval():
            results = lm_eval_evaluate(lm=cached, task_dict=loaded, bootstrap_iters=0, log_samples=False)
        return results["results"]["lp_pydoc_ppl"]["bits_per_byte,none"]

    baseline = cached_bits_per_byte()
    with removed_block(model, 1):
        assert cached_bits_per_byte() == baseline  # stale: the pruned model was never run
        pruned = evaluate(make_lm(model, tokenizer, batch_size=BATCH), task_set)
        assert pruned["lp_pydoc_ppl"].metrics["bits_per_byte"].value != baseline


def test_task_version_is_read_from_lm_eval_results():
    results = {"results": {"t": {"acc,none": 0.5, "sample_len": 3}}, "versions": {"t": 1.0}}
    assert task_scores(results, {}, "t").version == "1.0"
    assert task_scores({**results, "versions": {"t": "N/A"}}, {}, "t").version is None
