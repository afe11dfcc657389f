"""lm-eval harness wrapper: same numbers as lm_eval.simple_evaluate, and no state leaking between variants.

Tasks are local fixtures (tests/data/tasks: MMLU-shaped group of two subjects, ARC-shaped task, pydoc
perplexity), scored by the tiny random checkpoints; nothing is downloaded.
"""

import contextlib
import copy
import io
import logging
import math
import sys
import types
from pathlib import Path

import pytest
import torch
import transformers as tf

from layerprobe.core.errors import OFFLINE_HINT, TaskError
from layerprobe.evaluate import tasks as tasks_module
from layerprobe.evaluate.harness import evaluate, make_lm
from layerprobe.evaluate.lm_eval_globals import quiet_lm_eval
from layerprobe.evaluate.tasks import build_tasks, is_generation_task

TASKS_DIR = Path(__file__).parents[1] / "data" / "tasks"
NAMES = ["lp_mmlu", "lp_arc_like", "lp_pydoc_ppl"]
BATCH = 4


def _load(path):
    model = tf.AutoModelForCausalLM.from_pretrained(path).eval()
    return model, tf.AutoTokenizer.from_pretrained(path)


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """Tiny models gain nothing from threads, and on a busy 2-core box idle OpenMP spinning makes every
    forward pass 20-50x slower; one thread keeps this file fast."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def task_set():
    return build_tasks(NAMES, include_path=TASKS_DIR)


@pytest.fixture(scope="module")
def models(tiny_checkpoints):
    return {arch: _load(tiny_checkpoints[arch]) for arch in ("llama", "gpt2", "qwen3")}


def _simple_evaluate(model, tokenizer, names, monkeypatch, **kwargs):
    """lm-eval's own entry point, fresh HFLM and tasks, run where lm-eval resolves data_files (cwd)."""
    import lm_eval
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    monkeypatch.chdir(TASKS_DIR)
    manager = TaskManager(include_path=str(TASKS_DIR), include_defaults=False)
    lm = HFLM(pretrained=model, tokenizer=tokenizer, batch_size=BATCH)
    return lm_eval.simple_evaluate(
        model=lm,
        tasks=names,
        task_manager=manager,
        bootstrap_iters=1000,
        random_seed=1234,
        numpy_random_seed=1234,
        torch_random_seed=1234,
        fewshot_random_seed=1234,
        **kwargs,
    )


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


# ----------------------------------------------------------------------------------------- building


def test_build_tasks_structure(task_set):
    assert task_set.names == tuple(NAMES)
    assert task_set.members == {
        "lp_mmlu": ("lp_mmlu_stem", "lp_mmlu_humanities"),
        "lp_arc_like": ("lp_arc_like",),
        "lp_pydoc_ppl": ("lp_pydoc_ppl",),
    }
    assert task_set.loaded["group_map"] == {"lp_mmlu": ["lp_mmlu_stem", "lp_mmlu_humanities"]}
    choice = "multiple_choice"
    assert task_set.output_types == {
        "lp_mmlu_stem": choice,
        "lp_mmlu_humanities": choice,
        "lp_arc_like": choice,
        "lp_pydoc_ppl": "loglikelihood_rolling",
    }
    assert not any(is_generation_task(task_set, name) for name in NAMES)
    assert all(task.get_config("num_fewshot") == 0 for task in task_set.tasks.values())


def test_relative_data_files_resolve_next_to_the_yaml_from_any_cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ts = build_tasks(["lp_pydoc_ppl"], include_path=TASKS_DIR)
    assert len(ts.tasks["lp_pydoc_ppl"].eval_docs) == 10
    # A YAML written for plain lm-eval (paths relative to the working directory) still loads.
    (tmp_path / "cwd_relative.yaml").write_text(
        (TASKS_DIR / "lp_pydoc_ppl.yaml").read_text().replace("task: lp_pydoc_ppl", "task: lp_cwd_relative")
    )
    monkeypatch.chdir(TASKS_DIR)
    ts = build_tasks(["lp_cwd_relative"], include_path=tmp_path)
    assert len(ts.tasks["lp_cwd_relative"].eval_docs) == 10


@pytest.mark.slow
def test_unknown_task_suggests_close_names():
    # Not in the include path, so lm-eval's whole index is searched too (the slow part of this file).
    with pytest.raises(TaskError) as caught:
        build_tasks(["lp_mmlu_stm", "mmlu_astronmy"], include_path=TASKS_DIR)
    message = str(caught.value)
    assert "'lp_mmlu_stm' (did you mean lp_mmlu_stem" in message
    assert "'mmlu_astronmy' (did you mean mmlu_astronomy" in message


def test_unreachable_data_is_a_task_error(tmp_path):
    common = (
        "output_type: multiple_choice\ntest_split: test\ndoc_to_text: '{{q}}'\ndoc_to_target: 0\n"
        "doc_to_choice: ['a', 'b']\n"
    )
    (tmp_path / "hub.yaml").write_text("task: lp_hub\ndataset_path: no-such-org/no-such-data\n" + common)
    missing = "dataset_kwargs: {data_files: {test: data/missing.jsonl}}\n"
    (tmp_path / "local.yaml").write_text("task: lp_local\ndataset_path: json\n" + missing + common)
    with pytest.raises(TaskError) as hub:
        build_tasks(["lp_hub"], include_path=tmp_path)
    assert "no-such-org/no-such-data" in str(hub.value) and hub.value.hint == OFFLINE_HINT
    with pytest.raises(TaskError) as local:
        build_tasks(["lp_local"], include_path=tmp_path)
    assert str(tmp_path / "data" / "missing.jsonl") in str(local.value)
    assert local.value.hint == tasks_module.LOCAL_FILES_HINT


def test_groups_without_a_single_score_and_duplicates_are_task_errors(tmp_path):
    data = TASKS_DIR / "data" / "arc_like_test.jsonl"
    task = (
        "dataset_path: json\ndataset_kwargs: {{data_files: {{test: {data}}}}}\n"
        "output_type: multiple_choice\ntest_split: test\ndoc_to_text: '{{{{question}}}}'\n"
        "doc_to_target: 0\ndoc_to_choice: '{{{{choices.text}}}}'\n"
    )
    (tmp_path / "a.yaml").write_text(f"task: lp_a\ntag: lp_tag\n{task.format(data=data)}")
    (tmp_path / "b.yaml").write_text(f"task: lp_b\ntag: lp_tag\n{task.format(data=data)}")
    (tmp_path / "group.yaml").write_text("group: lp_plain_group\ntask: [lp_a, lp_b]\n")
    with pytest.raises(TaskError, match="no aggregate_metric_list"):
        build_tasks(["lp_plain_group"], include_path=tmp_path)
    with pytest.raises(TaskError, match="tag for several tasks"):
        build_tasks(["lp_tag"], include_path=tmp_path)
    with pytest.raises(TaskError, match="asked for twice"):
        build_tasks(["lp_mmlu", "lp_mmlu_stem"], include_path=TASKS_DIR)


# ----------------------------------------------------------------------------------------- scoring


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_evaluate_equals_simple_evaluate(task_set, models, arch, monkeypatch):
    model, tokenizer = models[arch]
    ours = evaluate(make_lm(model, tokenizer, batch_size=BATCH), task_set)
    theirs = _simple_evaluate(model, tokenizer, NAMES, monkeypatch, log_samples=False)
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


def test_fewshot_contexts_identical_across_calls_and_equal_to_simple_evaluate(models, monkeypatch):
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
    theirs = _simple_evaluate(model, tokenizer, names, monkeypatch, num_fewshot=2, log_samples=True)
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
