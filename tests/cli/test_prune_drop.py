"""`layerprobe prune-drop`: one-line refusals with exit 2, and a run's table, plots and JSON schema."""

from __future__ import annotations

import json

import pytest
from command_line import RESULT, assert_one_line_error, invoke, invoke_prune_drop
from factories import TASKS, TASKS_DIR, copy_with_bare_tokenizer

from layerprobe.core import BUILTIN_CORPUS
from layerprobe.prune.state import PARTIAL_NAME


@pytest.mark.parametrize(
    ("model", "args", "message", "hint"),
    [
        pytest.param(  # an unknown name searches lm-eval's whole task index: about a minute
            "llama",
            ["--task", "lp_arc_likee"],
            "unknown lm-eval task: 'lp_arc_likee' (did you mean lp_arc_like,",  # the closest name first
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
        # the hint is tried by test_squad.py's runs of --task squad on this very checkpoint
        ("bert_qa", ["--task", "corpus", "--dataset", BUILTIN_CORPUS], "--task corpus has no metric", "--task squad"),
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
    result = invoke_prune_drop(model, *args, "--limit", 2, "--quiet", "--device", "cpu", "--out", out)
    assert_one_line_error(result, message, out)
    if hint is not None:
        assert hint in result.output.splitlines()[1]


def test_cli_run_writes_json_plots_and_table_with_the_documented_schema(tiny_checkpoints, tmp_path):
    out = tmp_path / "out"
    result = invoke_prune_drop(
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
    assert data["schema"] == "layerprobe/prune-drop@2" and data["engine"] == "shared"
    model = data["model"]
    assert model["num_layers"] == 4 and model["layer_path"] == "layers"  # relative to the base model
    assert model["architecture"] == "LlamaForCausalLM" and model["kind"] == "causal-lm"
    assert {"id", "revision", "commit", "dtype", "model_type", "block_class"} <= model.keys()
    assert data["settings"]["layers"] == [0, 3] and data["settings"]["limit"] == 2
    assert data["settings"]["num_fewshot"] == 2 and data["settings"]["tasks"] == list(TASKS)
    assert data["settings"]["multiplicity"] == "holm"  # the default: flags keep the family-wise error at 5 %
    family = sum(p is not None for t in data["tasks"].values() for m in t["metrics"].values() for p in m["p_value"])
    assert family > 6 and f"(Holm-adjusted, family of {family} tests; paired p-values)" in flat
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
                "p_value",
                "p_adjusted",
                "delta_method",
                "bootstrap",
                "stderr",
                "items",
                "stop",
                "delta_cs95",
            ]
            assert metric["items"] is None and metric["stop"] is None and metric["delta_cs95"] is None
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


def test_prune_drop_refuses_a_tokenizer_lm_eval_cannot_use_before_loading(tiny_checkpoints, tmp_path):
    """No EOS and no BOS: lm-eval would crash inside on the first empty context (a traceback, exit 1)."""
    path = copy_with_bare_tokenizer(tiny_checkpoints["llama"], tmp_path / "ckpt")
    out = tmp_path / "out"
    result = invoke_prune_drop(
        path, "--task", "lp_arc_like", "--include-path", TASKS_DIR, "--quiet", "--device", "cpu", "--out", out
    )
    assert_one_line_error(result, "neither an end-of-sequence nor a beginning-of-sequence token", out)
    assert "eos_token" in result.output.splitlines()[1]


@pytest.mark.slow  # over 2.5 s on 2 cores: the default tier stays under 3 minutes
def test_prune_drop_corpus_cli(tiny_checkpoints, tmp_path):
    args = [str(tiny_checkpoints["llama"]), "--task", "corpus", "--dataset", BUILTIN_CORPUS, "--tokens", "48"]
    result = invoke(
        "prune-drop", *args, "--seq-len", "16", "--device", "cpu", "--multiplicity", "bh", "--out", tmp_path
    )
    assert result.exit_code == 0, result.output
    assert "BH-adjusted (false discovery rate), family of 16 tests" in " ".join(result.output.split())
    data = json.loads((tmp_path / "prune_drop.json").read_text())
    assert data["settings"]["multiplicity"] == "bh"
    metrics = data["tasks"]["corpus"]["metrics"]
    assert set(metrics) == {"nll", "perplexity", "kl", "top1_agreement"}
    assert metrics["kl"]["baseline"] == pytest.approx(0, abs=1e-6) and metrics["top1_agreement"]["baseline"] == 1
    assert all(s is not None for s in metrics["nll"]["delta_stderr"])
    assert data["settings"]["corpus"]["tokens"] == 48


def test_cli_unit_and_span_errors_are_one_line(tiny_checkpoints, tmp_path):
    path = str(tiny_checkpoints["llama"])
    for extra, message in (
        (["--unit", "head"], "Unknown --unit"),
        (["--unit", "mlp", "--span", "2"], "--span"),
        (["--multiplicity", "bonferroni"], "--multiplicity"),
    ):
        result = invoke("prune-drop", path, "--task", "lp_arc_like", *extra, "--out", tmp_path)
        assert result.exit_code == 2, result.output
        assert message in result.output
