"""`layerprobe prune-curve`: every shared option reaches its spec; a run's JSON and figure; refusals before
the weights are read."""

from __future__ import annotations

import json

import pytest
from factories import TASKS_DIR, metric_drop, prune_drop_result, write_squad_json
from typer.testing import CliRunner

import layerprobe.model.load
import layerprobe.prune
import layerprobe.prune.curve
from layerprobe.cli.app import app
from layerprobe.core import BUILTIN_CORPUS, AngularSpec, CorpusSpec, LayerprobeError, ModelSpec
from layerprobe.measure.angular import run_angular
from layerprobe.results import write_json

CORPUS = CorpusSpec(BUILTIN_CORPUS, tokens=48, seq_len=16)
runner = CliRunner()


def test_prune_curve_passes_every_shared_option_to_its_spec(tmp_path, monkeypatch):
    seen = []

    def capture(spec, *_args):
        seen.append(spec)
        raise LayerprobeError("captured")

    monkeypatch.setattr(layerprobe.prune, "run_prune_curve", capture)
    args = ["prune-curve", "org/m", "--tasks", "a,b", "--num_fewshot", "3", "--batch_size", "auto:2"]
    args += ["--include_path", str(tmp_path), "--squad-data", str(tmp_path / "s.json"), "--limit", "0.5"]
    args += ["--model-args", "low_cpu_mem_usage=true,max_memory={0:1GiB}", "--load-in-8bit"]
    args += ["--attn-implementation", "eager", "--revision", "main", "--trust-remote-code", "--layers-path", "x.y"]
    args += ["--device", "cpu", "--dtype", "bfloat16", "--tokens", "1e3", "--seq-len", "64", "--seed", "7"]
    args += ["--output_path", str(tmp_path / "out"), "-q", "--precision", "0.1", "--round-size", "7"]
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and "captured" in result.output, result.output
    [spec] = seen
    prune = spec.prune
    model = prune.model
    assert model.model_args == {"low_cpu_mem_usage": True, "max_memory": {0: "1GiB"}}
    assert (model.quantization, model.attn_implementation, model.revision) == ("8bit", "eager", "main")
    assert (model.trust_remote_code, model.layers_path, model.device, model.dtype) == (True, "x.y", "cpu", "bfloat16")
    assert prune.tasks == ("a", "b") and prune.num_fewshot == 3 and prune.batch_size == "auto:2"
    assert prune.include_path == str(tmp_path) and prune.squad_data == str(tmp_path / "s.json")
    assert prune.limit == 0.5 and prune.seed == 7 and (prune.precision, prune.round_size) == (0.1, 7)
    assert prune.corpus.tokens == 1000 and prune.corpus.seq_len == 64


def test_angular_of_another_model_refused_before_loading(tiny_checkpoints, tmp_path, monkeypatch):
    measured = run_angular(AngularSpec(ModelSpec(str(tiny_checkpoints["gpt2"]), device="cpu"), CORPUS))
    write_json(tmp_path / "angular.json", measured.to_dict())
    monkeypatch.setattr(layerprobe.model.load, "load_model", lambda *a, **k: pytest.fail("weights loaded"))
    args = ["prune-curve", str(tiny_checkpoints["llama"]), "--task", "corpus", "--out", str(tmp_path), "-q"]
    result = runner.invoke(app, [*args, "--angular", str(tmp_path / "angular.json")])
    assert result.exit_code == 2 and "measured" in result.output, result.output
    result = runner.invoke(app, [*args, "--max-fraction", "0.1"])  # ⌊0.1·4⌋ = 0 blocks
    assert result.exit_code == 2 and "removes none" in result.output, result.output
    result = runner.invoke(app, ["prune-curve", str(tiny_checkpoints["bert_qa"]), "--task", "corpus", "-q"])
    assert result.exit_code == 2 and "has no metric" in result.output, result.output


def test_prune_curve_cli_end_to_end(tiny_checkpoints, tmp_path):
    args = [str(tiny_checkpoints["llama"]), "--task", "corpus", "--dataset", BUILTIN_CORPUS, "--tokens", "48"]
    args += ["--seq-len", "16", "--device", "cpu", "--baseline-seeds", "2", "--out", str(tmp_path), "-q"]
    result = runner.invoke(app, ["prune-curve", *args])
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "prune_curve.json").read_text())
    assert data["schema"] == "layerprobe/prune-curve@2" and data["settings"]["baseline_seeds"] == [1234, 1235]
    assert list(data["methods"]) == ["angular", "last", "random_1234", "random_1235"]  # the default: as before
    assert all(sorted(m["sets"]) == ["1", "2"] for m in data["methods"].values())
    text = " ".join(result.output.split())
    assert "random (seed 1234)" in text and "random_1234" not in text and "paired 95 % CI" in text
    rows = [[cell.strip() for cell in line.split("│")[1:-1]] for line in result.output.splitlines() if "│" in line]
    for n, chosen in data["methods"]["last"]["sets"].items():  # the table: one row per method × n
        score = chosen["scores"]["corpus"]["nll"]
        low, high = score["delta_ci95"]
        row = ["last", n, ",".join(map(str, chosen["blocks"])), f"{score['value']:.4f}"]
        assert [*row[:3], row[3], f"[{low:+.4f}, {high:+.4f}]"] in [[*r[:4], r[6]] for r in rows], rows
    for suffix in ("png", "pdf"):
        assert (tmp_path / f"prune_curve_corpus.{suffix}").stat().st_size > 1000
        (tmp_path / f"prune_curve_corpus.{suffix}").unlink()
    assert runner.invoke(app, ["plot", str(tmp_path / "prune_curve.json")]).exit_code == 0
    assert (tmp_path / "prune_curve_corpus.png").exists() and (tmp_path / "prune_curve_corpus.pdf").exists()


def test_every_method_runs_from_the_command_line(tiny_checkpoints, tmp_path):
    args = [str(tiny_checkpoints["llama"]), "--task", "corpus", "--dataset", BUILTIN_CORPUS, "--tokens", "48"]
    args += ["--seq-len", "16", "--device", "cpu", "--out", str(tmp_path), "-q", "--metric", "corpus:kl"]
    methods = "angular,last,influence,delta,greedy,random"
    result = runner.invoke(app, ["prune-curve", *args, "--methods", methods])
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "prune_curve.json").read_text())
    assert list(data["methods"]) == ["angular", "last", "influence", "delta", "greedy", "random_1234"]
    assert data["settings"]["metric"] == {"task": "corpus", "metric": "kl", "higher_is_better": False}
    delta, greedy = data["methods"]["delta"], data["methods"]["greedy"]
    assert delta["cost"]["variants_scored"] == 4 and greedy["cost"]["variants_scored"] == 4 + 3
    assert greedy["cost"]["reused"] == 4  # the first greedy step is delta's single removals
    assert greedy["sets"]["1"]["blocks"] == delta["sets"]["1"]["blocks"]
    for method in data["methods"].values():
        for chosen in method["sets"].values():
            assert set(chosen["scores"]["corpus"]) == {"nll", "perplexity", "kl", "top1_agreement"}
    assert "greedy: choosing cost 7 sets scored (4 reused from another method)" in " ".join(result.output.split())


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--methods", "angular,best"], "unknown best"),
        (["--methods", "last,last"], "give each method once"),
        (["--unit", "sublayers"], "has neither"),
        (["--methods", "last", "--baseline-seeds", "2"], "has no random"),
        (["--unit", "layers", "--methods", "greedy"], "Unknown --unit"),
        (["--prune-drop", "x.json"], "needs delta in --methods"),
        (["--metric", "arc:acc"], "'arc' is not one of the tasks"),
        (["--metric", "corpus:accuracy", "--methods", "greedy"], "the corpus task reports nll"),
        (["--methods", "last", "--angular", "a.json"], "--angular is read by the angular and influence"),
        (["--methods", "delta", "--prune-drop", "missing.json"], "missing.json"),
    ],
)
def test_curve_options_refused_before_the_weights_are_read(tiny_checkpoints, tmp_path, monkeypatch, extra, message):
    monkeypatch.setattr(layerprobe.model.load, "load_model", lambda *a, **k: pytest.fail("weights loaded"))
    args = ["prune-curve", str(tiny_checkpoints["llama"]), "--task", "corpus", "--out", str(tmp_path), "-q"]
    result = runner.invoke(app, [*args, *extra])
    assert result.exit_code == 2 and message in " ".join(result.output.split()), result.output


def test_delta_refuses_a_prune_drop_of_another_model(tiny_checkpoints, tmp_path, monkeypatch):
    monkeypatch.setattr(layerprobe.model.load, "load_model", lambda *a, **k: pytest.fail("weights loaded"))
    drop = prune_drop_result({"corpus": {"nll": metric_drop(3.0, [3.1, 3.2, 3.3, 3.4], hib=False)}})
    path = write_json(tmp_path / "prune_drop.json", drop.to_dict())
    args = ["prune-curve", str(tiny_checkpoints["llama"]), "--task", "corpus", "--out", str(tmp_path), "-q"]
    result = runner.invoke(app, [*args, "--methods", "delta", "--prune-drop", str(path)])
    assert result.exit_code == 2 and "measured org/base, not" in " ".join(result.output.split()), result.output


def test_prune_curve_loads_with_the_model_loading_options(tiny_checkpoints, tmp_path):
    args = [str(tiny_checkpoints["llama"]), "--tasks", "corpus", "--dataset", BUILTIN_CORPUS, "--tokens", "48"]
    args += ["--seq-len", "16", "--device", "cpu", "--dtype", "float32", "--batch_size", "2", "-q"]
    args += ["--model-args", "low_cpu_mem_usage=true", "--attn-implementation", "eager", "--output_path", str(tmp_path)]
    result = runner.invoke(app, ["prune-curve", *args])
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "prune_curve.json").read_text())
    assert data["model"]["model_args"] == {"low_cpu_mem_usage": True}
    assert data["model"]["attn_implementation"] == "eager" and data["settings"]["batch_size"] == 2
    refused = runner.invoke(app, ["prune-curve", *args[:-1], str(tmp_path / "x"), "--model-args", "dtype=float16"])
    assert refused.exit_code == 2 and "has its own option" in refused.output, refused.output


@pytest.mark.slow  # over 2.5 s on 2 cores: the default tier stays under 3 minutes
def test_prune_curve_scores_squad_from_a_local_file(tiny_checkpoints, tmp_path):
    squad = write_squad_json(tmp_path / "dev-v1.1.json")
    args = [str(tiny_checkpoints["bert_qa"]), "--task", "squad", "--squad-data", str(squad), "--limit", "4"]
    args += ["--dataset", BUILTIN_CORPUS, "--tokens", "48", "--seq-len", "16", "--device", "cpu", "-q"]
    result = runner.invoke(app, ["prune-curve", *args, "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "out" / "prune_curve.json").read_text())
    assert set(data["baseline"]["squad"]) >= {"exact_match", "f1"}
    missing = runner.invoke(app, ["prune-curve", *args[:4], str(tmp_path / "none.json"), *args[5:]])
    assert missing.exit_code == 2 and "none.json" in missing.output, missing.output


def test_precision_refuses_what_cannot_be_scored_sequentially_before_the_weights_load(tiny_checkpoints, monkeypatch):
    monkeypatch.setattr(layerprobe.prune.curve, "load_model", lambda *a, **k: pytest.fail("weights loaded"))
    args = ["prune-curve", str(tiny_checkpoints["llama"]), "--include-path", str(TASKS_DIR), "--device", "cpu", "-q"]
    cases = [
        (["--task", "corpus", "--precision", "0.1"], "--precision scores lm-eval tasks"),  # no per-document range
        (["--task", "lp_pydoc_ppl", "--precision", "0.1"], "not a mean"),  # perplexities: no paired mean
        (["--task", "lp_arc_like", "--precision", "1.5"], "--precision must lie in (0, 1)"),
        (["--task", "lp_arc_like", "--precision", "0.1", "--round-size", "0"], "--round-size must be a positive"),
    ]
    for extra, message in cases:
        result = runner.invoke(app, [*args, *extra])
        assert result.exit_code == 2 and message in " ".join(result.output.split()), result.output
