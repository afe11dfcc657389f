"""prune-drop: every ΔP is what lm-eval (or the SQuAD scorer) gives on a model saved without that block.

The references are independent of layerprobe's surgery: `reference.physically_deleted` builds a fresh
model from a config with L-1 layers and remapped weights, and lm-eval's own `simple_evaluate` scores it
from a fresh `HFLM` and freshly built tasks. Besides the metrics (accuracies hide small differences on
random tiny models), every request's log-likelihood is compared, so a wrong pass cannot hide behind a
coarse accuracy. Tasks are the local fixtures in tests/data/tasks; nothing touches the network.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
import transformers as tf
from factories import build_checkpoint
from reference import counted_block_rows, physically_deleted, squad_v11_json
from typer.testing import CliRunner

from layerprobe.cli.app import app
from layerprobe.core import ModelSpec, PruneSpec
from layerprobe.core.errors import ResultError, TaskError
from layerprobe.data.squad import load_squad
from layerprobe.evaluate.squad import SquadScorer
from layerprobe.model.load import load_model
from layerprobe.model.progress import Progress
from layerprobe.model.stack import find_layers
from layerprobe.prune.drop import run_prune_drop
from layerprobe.prune.state import PARTIAL_NAME

TASKS_DIR = Path(__file__).parents[1] / "data" / "tasks"
TASKS = ("lp_mmlu", "lp_arc_like", "lp_pydoc_ppl")  # MMLU-shaped group, ARC-shaped, rolling perplexity
CAUSAL = ("llama", "qwen3", "gpt2", "deepseek_v3")
# The default run checks one architecture end to end; the sweep over the others is marked slow.
CAUSAL_SWEEP = [CAUSAL[0], *(pytest.param(a, marks=pytest.mark.slow) for a in CAUSAL[1:])]
BATCH, LIMIT, SEED, FEWSHOT = 4, 3, 1234, 2
RESULT = "prune_drop.json"
runner = CliRunner()


def make_spec(path, tasks=TASKS, **overrides) -> PruneSpec:
    settings = dict(
        layers="0,3",
        limit=LIMIT,
        num_fewshot=FEWSHOT,
        batch_size=BATCH,
        seed=SEED,
        include_path=str(TASKS_DIR),
        engine="simple",
    )
    settings.update(overrides)
    return PruneSpec(model=ModelSpec(str(path), device="cpu"), tasks=tuple(tasks), **settings)


def load(path):
    return load_model(ModelSpec(str(path), device="cpu"), purpose="head")


def value_at(drop, layer):
    """A MetricDrop's value for one variant (None: the baseline)."""
    return drop.baseline if layer is None else drop.pruned[drop.layers.index(layer)]


def stderr_at(drop, layer):
    return drop.baseline_stderr if layer is None else drop.stderr[drop.layers.index(layer)]


def comparable(result) -> dict:
    """A result's JSON without what legitimately changes between runs (time, duration, out dir)."""
    data = result.to_dict()
    data.pop("run")
    return data


# --------------------------------------------------------------------------------- watching the runs
def task_set_responses(task_set) -> dict:
    """{(leaf task, doc_id): [responses of request 0, request 1, ...]} from lm-eval's filled instances."""
    grouped: dict = {}
    for leaf, task in task_set.tasks.items():
        for inst in task.instances:
            grouped.setdefault((leaf, inst.doc_id), []).append((inst.idx, list(inst.resps)))
    return {key: [resps for _, resps in sorted(pairs, key=lambda p: p[0])] for key, pairs in grouped.items()}


def sample_responses(samples: dict) -> dict:
    """The same mapping from `simple_evaluate(..., log_samples=True)`'s samples."""
    return {(leaf, s["doc_id"]): [list(r) for r in s["resps"]] for leaf, rows in samples.items() for s in rows}


class Spy:
    """Watches runs through the front door (Progress events): per finished (task, variant), the order,
    the scorer's raw answers, the scorers used, and the rows every block pass reported."""

    def __init__(self) -> None:
        self.recorded: list[tuple[str, int | None]] = []
        self.answers: dict[tuple[str, int | None], object] = {}
        self.scorers: list = []
        self.block_rows = 0
        self.advances: list[float] = []
        self.progress = Progress(on_advance=self.advances.append, on_evaluation=self._evaluated, on_block=self._block)

    def reset(self) -> None:
        self.__init__()

    def _evaluated(self, event) -> None:
        self.recorded.append((event.task, event.variant))
        if event.scorer not in self.scorers:
            self.scorers.append(event.scorer)
        if hasattr(event.scorer, "task_sets"):
            self.answers[(event.task, event.variant)] = task_set_responses(event.scorer.task_sets[event.task])
        else:
            self.answers[(event.task, event.variant)] = dict(event.scorer.last.predictions)

    def _block(self, event) -> None:
        self.block_rows += event.rows


@pytest.fixture()
def spy():
    return Spy()


def assert_same_answers(got: dict, want: dict, rel: float = 1e-5) -> None:
    """Per request: log-likelihoods within `rel`, greedy flags identical."""
    assert got.keys() == want.keys()
    for key in want:
        assert len(got[key]) == len(want[key]), key
        for g_request, w_request in zip(got[key], want[key], strict=True):
            for g, w in zip(g_request, w_request, strict=True):
                if isinstance(w, (tuple, list)):  # (log-likelihood, is_greedy)
                    assert g[0] == pytest.approx(w[0], rel=rel, abs=1e-6), key
                    assert bool(g[1]) == bool(w[1]), key
                else:  # loglikelihood_rolling: one float
                    assert g == pytest.approx(w, rel=rel, abs=1e-6), key


# ------------------------------------------------------------------------------------ the references
def lm_eval_reference(model, tokenizer, monkeypatch, tasks=TASKS) -> dict:
    """lm-eval's own entry point on `model`: fresh HFLM, fresh tasks, same limit/seed/few-shot."""
    import lm_eval
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    with monkeypatch.context() as patch:
        patch.chdir(TASKS_DIR)  # plain lm-eval resolves the YAMLs' relative data_files against the cwd
        manager = TaskManager(include_path=str(TASKS_DIR), include_defaults=False)
        lm = HFLM(pretrained=model, tokenizer=tokenizer, batch_size=BATCH)
        return lm_eval.simple_evaluate(
            model=lm,
            tasks=list(tasks),
            task_manager=manager,
            limit=LIMIT,
            num_fewshot=FEWSHOT,
            bootstrap_iters=1000,
            log_samples=True,
            random_seed=SEED,
            numpy_random_seed=SEED,
            torch_random_seed=SEED,
            fewshot_random_seed=SEED,
        )


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
def test_prune_drop_equals_lm_eval_on_a_physically_deleted_model(arch, tiny_checkpoints, tmp_path, spy, monkeypatch):
    path = tiny_checkpoints[arch]
    loaded = load(path)
    layers = [0, 1, 3]  # the first, a middle and the last block
    results, answers = {}, {}
    for engine in ("simple", "shared"):
        spy.reset()
        with counted_block_rows(find_layers(loaded.model).blocks) as hooked:
            results[engine] = run_prune_drop(
                make_spec(path, layers="0,1,3", engine=engine), tmp_path / engine, loaded=loaded, progress=spy.progress
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
        reference = lm_eval_reference(model, tokenizer, monkeypatch)
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


# --------------------------------------------------------------------------------- 2. engines agree
@pytest.fixture(scope="module")
def deep_llama(tmp_path_factory) -> Path:
    return build_checkpoint("llama", tmp_path_factory.mktemp("deep") / "llama8", num_layers=8)


@pytest.mark.slow
def test_engines_agree_on_an_8_layer_model_and_the_shared_one_does_less_work(deep_llama, tmp_path, spy):
    loaded = load(deep_llama)
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
                make_spec(deep_llama, layers=None, engine=engine, prefix_reuse=False),
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


GENERATION_YAML = """\
task: lp_gen
dataset_path: json
dataset_kwargs:
  data_files:
    test: data/arc_like_test.jsonl
output_type: generate_until
test_split: test
doc_to_text: "Question: {{question}}\\nAnswer:"
doc_to_target: "{{choices.text[choices.label.index(answerKey)]}}"
generation_kwargs:
  until: ["\\n"]
  max_gen_toks: 3
  do_sample: false
metric_list:
  - metric: exact_match
    aggregation: mean
    higher_is_better: true
metadata:
  version: 1.0
"""


@pytest.fixture(scope="module")
def tasks_with_generation(tmp_path_factory) -> Path:
    """The local tasks plus a tiny generate_until task, in one include path."""
    folder = tmp_path_factory.mktemp("gen") / "tasks"
    shutil.copytree(TASKS_DIR, folder)
    (folder / "lp_gen.yaml").write_text(GENERATION_YAML)
    return folder


def test_engine_auto_falls_back_to_simple_for_generation_and_shared_refuses(
    tiny_checkpoints, tmp_path, spy, tasks_with_generation
):
    path = tiny_checkpoints["llama"]
    loaded = load(path)
    spec = make_spec(
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
    assert json.loads((tmp_path / "auto" / RESULT).read_text())["engine"] == "simple"
    assert list(result.tasks["lp_gen"].metrics) == ["exact_match"]
    # Without a generation task, auto picks the shared engine.
    assert (
        run_prune_drop(
            make_spec(path, tasks=("lp_arc_like",), layers="3", limit=2, engine="auto"),
            tmp_path / "auto2",
            loaded=loaded,
        ).engine
        == "shared"
    )

    shared = make_spec(
        path, tasks=("lp_gen",), layers="3", limit=2, include_path=str(tasks_with_generation), engine="shared"
    )
    with pytest.raises(TaskError, match="--engine shared cannot score this run: task lp_gen generates text"):
        run_prune_drop(shared, tmp_path / "shared", loaded=loaded)
    assert not (tmp_path / "shared" / RESULT).exists()


# ------------------------------------------------------------------------------------------- 3. SQuAD
LONG = (
    "The Eiffel Tower is a wrought-iron lattice tower on the Champ de Mars in Paris, France. It is named "
    "after the engineer Gustave Eiffel, whose company designed and built the tower between 1887 and 1889. "
    "It was built as the centrepiece of the 1889 World's Fair. "
) * 4  # > 256 tokens: several windows
SQUAD_PARAGRAPHS = [
    (
        LONG,
        [
            ("e1", "Who is the tower named after?", ["Gustave Eiffel"]),
            ("e2", "In which city is the tower?", ["Paris"]),
            ("e3", "For which event was the tower built?", ["the 1889 World's Fair"]),
        ],
    ),
    (
        "Python is a high-level programming language created by Guido van Rossum and first released in 1991.",
        [("p1", "Who created Python?", ["Guido van Rossum"]), ("p2", "When was Python first released?", ["1991"])],
    ),
    (
        "The Amazon River flows through Peru, Colombia and Brazil before it reaches the Atlantic Ocean.",
        [("a1", "Into which ocean does the Amazon flow?", ["the Atlantic Ocean", "Atlantic Ocean"])],
    ),
]


@pytest.fixture(scope="module")
def squad_file(tmp_path_factory) -> Path:
    data = squad_v11_json((f"t{i}", context, qas) for i, (context, qas) in enumerate(SQUAD_PARAGRAPHS))
    path = tmp_path_factory.mktemp("squad") / "dev-v1.1.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


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


# ------------------------------------------------------------------------------------------ 4. resume
RESUME_TASKS = ("lp_arc_like", "lp_pydoc_ppl")
ORDER = [
    ("lp_arc_like", None),
    ("lp_pydoc_ppl", None),
    ("lp_arc_like", 0),
    ("lp_pydoc_ppl", 0),
    ("lp_arc_like", 3),
    ("lp_pydoc_ppl", 3),
]


def resume_spec(path, **overrides) -> PruneSpec:
    settings = dict(tasks=RESUME_TASKS, limit=2, num_fewshot=None)
    settings.update(overrides)
    return make_spec(path, **settings)


def done_entries(out: Path) -> set[tuple[str, str]]:
    data = json.loads((out / PARTIAL_NAME).read_text())
    assert data["schema"] == "layerprobe/prune-drop-partial@1"
    return {(task, variant) for task, variants in data["done"].items() for variant in variants}


def test_resume_continues_an_interrupted_run_and_recomputes_nothing(tiny_checkpoints, tmp_path, spy):
    path = tiny_checkpoints["llama"]
    loaded = load(path)
    full = run_prune_drop(resume_spec(path), tmp_path / "full", loaded=loaded, progress=spy.progress)
    assert spy.recorded == ORDER

    k, out = 3, tmp_path / "interrupted"
    spy.reset()

    def interrupting(event):  # Ctrl-C right after the k-th evaluation was saved
        spy.recorded.append((event.task, event.variant))
        if len(spy.recorded) == k:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_prune_drop(resume_spec(path), out, loaded=loaded, progress=Progress(on_evaluation=interrupting))
    assert spy.recorded == ORDER[:k]
    assert done_entries(out) == {(task, "baseline" if layer is None else str(layer)) for task, layer in ORDER[:k]}
    assert not (out / RESULT).exists()
    assert find_layers(loaded.model).num_layers == 4  # the interrupted variant's block is back

    # A different experiment may not continue this one; the progress file is left as it was.
    before = (out / PARTIAL_NAME).read_text()
    for overrides, field in (
        ({"limit": 3}, "limit"),
        ({"num_fewshot": 1}, "num_fewshot"),
        ({"seed": 7}, "seed"),
        ({"prefix_reuse": False}, "prefix_reuse"),
    ):
        with pytest.raises(ResultError, match=f"different run .*{field}: was"):
            run_prune_drop(resume_spec(path, **overrides), out, resume=True, loaded=loaded)
    with pytest.raises(ResultError, match="model: was"):
        run_prune_drop(resume_spec(tiny_checkpoints["gpt2"]), out, resume=True)
    refused = invoke(
        path,
        *[a for t in RESUME_TASKS for a in ("--task", t)],
        "--include-path",
        TASKS_DIR,
        "--layers",
        "0,3",
        "--limit",
        3,
        "--batch-size",
        BATCH,
        "--device",
        "cpu",
        "--quiet",
        "--out",
        out,
        "--resume",
    )
    assert_one_line_error(refused, "--resume refuses to mix results of a different run (limit: was 2, now 3.0)", out)
    assert (out / PARTIAL_NAME).read_text() == before

    # Without --resume the unfinished run is not silently overwritten either.
    with pytest.raises(ResultError, match="unfinished prune-drop run"):
        run_prune_drop(resume_spec(path), out, loaded=loaded)
    assert (out / PARTIAL_NAME).read_text() == before

    spy.reset()
    resumed = run_prune_drop(resume_spec(path), out, resume=True, loaded=loaded, progress=spy.progress)
    assert spy.recorded == ORDER[k:]  # only what was missing
    assert comparable(resumed) == comparable(full)
    assert json.loads((out / RESULT).read_text())["tasks"] == full.to_dict()["tasks"]
    assert not (out / PARTIAL_NAME).exists()


def test_resume_with_an_extra_task_computes_only_that_task(tiny_checkpoints, tmp_path, spy):
    path = tiny_checkpoints["llama"]
    loaded = load(path)
    advanced = {"n": 0}

    def stop_after_the_last(amount):  # every evaluation finished, interrupted before the result is written
        advanced["n"] += amount
        if advanced["n"] == len(ORDER):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_prune_drop(resume_spec(path), tmp_path, loaded=loaded, progress=Progress(on_advance=stop_after_the_last))
    assert len(done_entries(tmp_path)) == len(ORDER) and not (tmp_path / RESULT).exists()

    spy.reset()
    result = run_prune_drop(
        resume_spec(path, tasks=(*RESUME_TASKS, "lp_mmlu")), tmp_path, resume=True, loaded=loaded, progress=spy.progress
    )
    assert spy.recorded == [("lp_mmlu", None), ("lp_mmlu", 0), ("lp_mmlu", 3)]
    assert list(result.tasks) == [*RESUME_TASKS, "lp_mmlu"]
    alone = run_prune_drop(resume_spec(path, tasks=("lp_mmlu",)), tmp_path / "alone", loaded=loaded)
    assert result.tasks["lp_mmlu"] == alone.tasks["lp_mmlu"]


# ---------------------------------------------------------------------------------- 5. the CLI
def invoke(*args):
    # A wide console, so that rich does not wrap the tables' titles (tmp paths are long).
    return runner.invoke(app, ["prune-drop", *map(str, args)], env={"COLUMNS": "250"})


def assert_one_line_error(result, message: str, out: Path) -> None:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = result.output.strip().splitlines()
    assert lines[0].startswith("error: ") and message in lines[0], result.output
    assert len(lines) == 1 or (len(lines) == 2 and lines[1].startswith("hint: ")), result.output
    assert not (out / RESULT).exists()


@pytest.mark.parametrize(
    ("model", "args", "message", "hint"),
    [
        pytest.param(  # an unknown name searches lm-eval's whole task index: about a minute
            "llama",
            ["--task", "lp_arc_likee"],
            "unknown lm-eval task: 'lp_arc_likee' (did you mean lp_arc_like?)",
            "--include-path",
            marks=pytest.mark.slow,
        ),
        ("llama", ["--task", "lp_arc_like", "--layers", "0,4"], "out of range: the model has 4 blocks", "0 to 3"),
        ("llama", ["--task", "lp_arc_like", "--layers", "1-x"], "Cannot read layer range '1-x'", "0-3,7"),
        ("llama", ["--task", "lp_arc_like", "--layers", "3-1"], "runs backwards", "1-3"),
        ("llama", ["--task", "squad"], "is a causal LM", "--task squad_completion"),
        (
            "bert_qa",
            ["--task", "lp_mmlu"],
            "'lp_mmlu' is an lm-evaluation-harness task and needs a causal LM",
            "--task squad",
        ),
        ("bert", ["--task", "squad"], "has no question-answering head", "ForQuestionAnswering"),
        ("{missing}", ["--task", "lp_arc_like"], "No model directory at", "Check the path"),
        ("llama", ["--task", "lp_arc_like", "--batch-size", "0"], "--batch-size must be a positive integer", None),
        ("llama", ["--task", "lp_arc_like", "--batch-size", "many"], "--batch-size must be a positive integer", None),
        ("bert_qa", ["--task", "squad", "--squad-data", "{missing}.json"], "does not exist", "--squad-data"),
        (
            "llama",
            ["--task", "lp_gen", "--include-path", "{generation}", "--engine", "shared"],
            "--engine shared cannot score this run: task lp_gen generates text",
            "--engine simple",
        ),
    ],
)
def test_cli_errors_are_one_line_exit_2_and_write_nothing(
    tiny_checkpoints, tmp_path, tasks_with_generation, model, args, message, hint
):
    missing = tmp_path / "nowhere"
    model = str(missing) if model == "{missing}" else tiny_checkpoints[model]
    args = [a.format(missing=missing, generation=tasks_with_generation) for a in args]
    if "--include-path" not in args:
        args += ["--include-path", str(TASKS_DIR)]
    out = tmp_path / "out"
    result = invoke(model, *args, "--limit", 2, "--quiet", "--device", "cpu", "--out", out)
    assert_one_line_error(result, message, out)
    if hint is not None:
        assert hint in result.output.splitlines()[1]


# ------------------------------------------------------------------------- 5 + 6. a run and its JSON
def test_cli_run_writes_json_plots_and_table_with_the_documented_schema(tiny_checkpoints, tmp_path):
    out = tmp_path / "out"
    result = invoke(
        tiny_checkpoints["llama"],
        *[a for t in TASKS for a in ("--task", t)],
        "--include-path",
        TASKS_DIR,
        "--layers",
        "0,3",
        "--limit",
        2,
        "--num-fewshot",
        2,
        "--batch-size",
        4,
        "--quiet",
        "--device",
        "cpu",
        "--out",
        out,
    )
    assert result.exit_code == 0, result.output
    for task in TASKS:
        assert (out / f"prune_drop_{task}.png").stat().st_size > 1000
    flat = " ".join(result.output.split())  # rich wraps a table's title to the table's width
    assert "removed block" in flat and "ΔP" in flat and "engine: shared" in flat
    for task, metric in (("lp_mmlu", "acc"), ("lp_arc_like", "acc"), ("lp_pydoc_ppl", "word_perplexity")):
        assert f"{task} · {metric}: baseline" in flat
    assert f"wrote {out / RESULT}" in result.output
    assert not (out / PARTIAL_NAME).exists()
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no temp files left

    data = json.loads((out / RESULT).read_text())
    assert data["schema"] == "layerprobe/prune-drop@1" and data["engine"] == "shared"
    model = data["model"]
    assert model["num_layers"] == 4 and model["layer_path"] == "layers"  # relative to the base model
    assert model["architecture"] == "LlamaForCausalLM" and model["kind"] == "causal-lm"
    assert {"id", "revision", "commit", "dtype", "model_type", "block_class"} <= model.keys()
    assert data["settings"]["layers"] == [0, 3] and data["settings"]["limit"] == 2
    assert data["settings"]["num_fewshot"] == 2 and data["settings"]["tasks"] == list(TASKS)
    assert {"started_at", "seconds", "versions", "device"} <= data["run"].keys()
    assert list(data["tasks"]) == list(TASKS)
    expected_metrics = {
        "lp_mmlu": ["acc"],
        "lp_arc_like": ["acc", "acc_norm"],
        "lp_pydoc_ppl": ["word_perplexity", "byte_perplexity", "bits_per_byte"],
    }
    for task, body in data["tasks"].items():
        assert body["num_fewshot"] == 2 and body["limit"] == 2
        assert list(body["metrics"]) == expected_metrics[task]
        for name, metric in body["metrics"].items():
            assert list(metric) == [
                "baseline",
                "baseline_stderr",
                "higher_is_better",
                "layers",
                "pruned",
                "delta",
                "delta_stderr",
                "delta_ci95",
                "significant",
                "delta_method",
                "bootstrap",
                "stderr",
            ]
            assert metric["layers"] == [0, 3] and len(metric["pruned"]) == len(metric["stderr"]) == 2
            assert len(metric["delta_stderr"]) == len(metric["delta_ci95"]) == len(metric["significant"]) == 2
            assert metric["delta_method"] == ("paired_mean" if name.startswith("acc") else "paired_bootstrap")
            assert metric["delta"] == pytest.approx([p - metric["baseline"] for p in metric["pruned"]], abs=1e-12)
            assert metric["higher_is_better"] is (name.startswith("acc"))
            if name.startswith("acc"):
                assert metric["baseline_stderr"] is not None and None not in metric["stderr"]
    assert data["tasks"]["lp_mmlu"]["samples"] == 4  # two subjects, two documents each
    summary = data["summary"]
    assert list(summary) == list(TASKS)
    for task, entry in summary.items():
        primary = expected_metrics[task][0]
        assert entry["metric"] == primary
        assert entry["baseline"] == data["tasks"][task]["metrics"][primary]["baseline"]
        assert entry["most_harmful"]["layer"] in (0, 3)


def test_a_retrained_local_checkpoint_is_a_different_run(tmp_path):
    """Local checkpoints have no commit hash: their files pin them, so --resume cannot mix two trainings."""
    import os

    from layerprobe.prune.state import files_stat_digest

    checkpoint = tmp_path / "ckpt"
    checkpoint.mkdir()
    (checkpoint / "model.safetensors").write_bytes(b"weights of run 1")
    first = files_stat_digest(str(checkpoint))
    assert files_stat_digest(str(checkpoint)) == first
    (checkpoint / "model.safetensors").write_bytes(b"weights of run 2, retrained")
    os.utime(checkpoint / "model.safetensors", ns=(1, 1))
    assert files_stat_digest(str(checkpoint)) != first
    assert files_stat_digest(str(tmp_path / "missing")).endswith("@missing")


# ------------------------------------------------------------------- architectures at the edges (issue 8)
def _save_with_tokenizer(model, path: Path) -> Path:
    from factories import byte_level_tokenizer

    model.save_pretrained(path)
    byte_level_tokenizer(add_bos=False).save_pretrained(path)
    return path


def _jamba(layers: int, period: int, offset: int):
    return tf.JambaConfig(
        vocab_size=512, hidden_size=32, intermediate_size=48, num_attention_heads=4, num_key_value_heads=2,
        num_hidden_layers=layers, num_experts=2, num_experts_per_tok=1, attn_layer_period=period,
        attn_layer_offset=offset, expert_layer_period=period, expert_layer_offset=offset, use_mamba_kernels=False,
        mamba_d_state=4, mamba_d_conv=4, mamba_expand=2, pad_token_id=0, bos_token_id=1, eos_token_id=2,
        architectures=["JambaForCausalLM"],
    )  # fmt: skip


def test_jamba_prune_drop_equals_lm_eval_on_a_physically_rebuilt_model(tmp_path, spy, monkeypatch):
    """Both engines on Jamba (derived layer pattern) against lm-eval on a five-block Jamba built from its config.

    Six blocks with attention and experts at 1 and 4 (period 3, offset 1); without block 2 that is a
    five-block Jamba with period 2, offset 1. The simple engine crashed here when the pattern realigned.
    """
    torch.manual_seed(0)
    model = tf.JambaForCausalLM(_jamba(6, 3, 1)).eval()
    path = _save_with_tokenizer(model, tmp_path / "jamba")
    reference = tf.JambaForCausalLM(_jamba(5, 2, 1)).eval()
    state = {}
    for key, value in model.state_dict().items():
        if key.startswith("model.layers."):
            index, rest = key[len("model.layers.") :].split(".", 1)
            if int(index) == 2:
                continue
            key = f"model.layers.{int(index) - (int(index) > 2)}.{rest}"
        state[key] = value
    reference.load_state_dict(state, strict=True)
    loaded = load(path)
    tasks = ("lp_arc_like",)
    want = lm_eval_reference(reference, tf.AutoTokenizer.from_pretrained(path), monkeypatch, tasks=tasks)
    want_answers = sample_responses(want["samples"])
    for engine in ("simple", "shared"):
        spy.reset()
        result = run_prune_drop(
            make_spec(path, tasks=tasks, layers="2", engine=engine),
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
    from layerprobe.core import AngularSpec, CorpusSpec
    from layerprobe.measure.angular import run_angular

    torch.manual_seed(0)
    config = tf.Llama4TextConfig(
        vocab_size=512, hidden_size=32, intermediate_size=32, intermediate_size_mlp=64, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, num_hidden_layers=4, num_local_experts=2, interleave_moe_layer_step=2,
        max_position_embeddings=256, bos_token_id=1, eos_token_id=2, pad_token_id=0,
        architectures=["Llama4ForCausalLM"],
    )  # fmt: skip
    path = _save_with_tokenizer(tf.Llama4ForCausalLM(config).eval(), tmp_path / "llama4")
    angular = run_angular(
        AngularSpec(ModelSpec(str(path), device="cpu"), CorpusSpec("builtin:pydoc", tokens=256, seq_len=64))
    )
    tasks = ("lp_arc_like",)
    loaded = load(path)
    results = {}
    for engine in ("auto", "simple"):
        spy.reset()
        results[engine] = run_prune_drop(
            make_spec(path, tasks=tasks, layers="1,3", engine=engine),
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


def test_prune_drop_refuses_a_tokenizer_lm_eval_cannot_use_before_loading(tiny_checkpoints, tmp_path):
    """No EOS and no BOS: lm-eval would crash inside on the first empty context (a traceback, exit 1)."""
    path = tmp_path / "ckpt"
    shutil.copytree(tiny_checkpoints["llama"], path)
    original = tf.AutoTokenizer.from_pretrained(path)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        (path / name).unlink(missing_ok=True)
    tf.PreTrainedTokenizerFast(tokenizer_object=original.backend_tokenizer).save_pretrained(path)
    out = tmp_path / "out"
    result = invoke(
        path, "--task", "lp_arc_like", "--include-path", TASKS_DIR, "--quiet", "--device", "cpu", "--out", out
    )
    assert_one_line_error(result, "neither an end-of-sequence nor a beginning-of-sequence token", out)
    assert "eos_token" in result.output.splitlines()[1]
