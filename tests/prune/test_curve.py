"""prune-curve: Gromov's span choice from a given angular matrix, scores vs physically deleted spans, CLI."""

from __future__ import annotations

import json

import pytest
import torch
import transformers as tf
from typer.testing import CliRunner

from layerprobe.cli.app import app
from layerprobe.core import BUILTIN_CORPUS, AngularSpec, CorpusSpec, ModelSpec, PruneSpec
from layerprobe.core.errors import LayerprobeError
from layerprobe.measure.angular import run_angular
from layerprobe.prune.curve import PruneCurveSpec, choose_spans, gromov_start, run_prune_curve
from layerprobe.results import PruneCurveResult, load_result, write_json
from tests.evaluate.test_corpus_metric import _deleted_span, _reference

CORPUS = CorpusSpec(BUILTIN_CORPUS, tokens=48, seq_len=16)
runner = CliRunner()


def _matrix(size: int, low: dict[tuple[int, int], float]) -> list[list[float]]:
    """A symmetric (size+1)² distance matrix: d = 0.1·|i−j| + 0.5 except the given (i, j) entries."""
    m = [[0.0 if i == j else 0.5 + 0.1 * abs(i - j) for j in range(size + 1)] for i in range(size + 1)]
    for (i, j), value in low.items():
        m[i][j] = m[j][i] = value
    return m


def test_gromov_picks_the_argmin_span():
    m = _matrix(6, {(3, 4): 0.01, (1, 3): 0.05, (2, 5): 0.02})
    assert [gromov_start(m, n) for n in (1, 2, 3)] == [3, 1, 2]
    chosen = choose_spans(m, 3, seeds=[7, 8])
    assert chosen["last"] == {1: 4, 2: 3, 3: 2}  # the n blocks before the final block 5
    for seed in (7, 8):
        starts = chosen[f"random_{seed}"]
        assert all(0 <= s <= 6 - n for n, s in starts.items())
    assert chosen["random_7"] == choose_spans(m, 3, seeds=[7])["random_7"]  # fixed seeds: reproducible


def test_bad_fraction_refused():
    spec = PruneSpec(ModelSpec("x"), ("corpus",))
    for bad in (0, 1.5):
        with pytest.raises(LayerprobeError):
            PruneCurveSpec(spec, max_fraction=bad)
    with pytest.raises(LayerprobeError):
        PruneCurveSpec(spec, baseline_seeds=-1)


def test_curve_uses_given_angular_and_scores_physically_deleted_spans(tiny_checkpoints, tmp_path):
    path = tiny_checkpoints["llama"]
    model = ModelSpec(str(path), dtype="float32", device="cpu")
    measured = run_angular(AngularSpec(model, CORPUS))
    data = measured.to_dict()
    data["distance"] = _matrix(4, {(2, 3): 0.001, (1, 3): 0.002})  # argmin: n=1 → 2, n=2 → 1
    write_json(tmp_path / "angular.json", data)
    spec = PruneCurveSpec(PruneSpec(model, ("corpus",), batch_size=2, corpus=CORPUS), max_fraction=0.5)
    result = run_prune_curve(spec, tmp_path, angular=str(tmp_path / "angular.json"))
    assert result.selection["start"] == [2, 1] and result.selection["distance"] == [0.001, 0.002]
    nll = result.tasks["corpus"]["nll"]
    assert nll.methods["angular"].start == [2, 1] and nll.methods["last"].start == [2, 1]
    base64 = tf.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float64).eval()
    from layerprobe.evaluate.corpus_metric import corpus_windows
    from layerprobe.model.load import load_model

    windows = corpus_windows(load_model(model, purpose="head"), CORPUS)
    for n, start in ((1, 2), (2, 1)):
        span = tuple(range(start, start + n))
        ref = _reference(base64, _deleted_span(path, "llama", span, tmp_path / f"del{n}"), windows)
        index = nll.methods["angular"].n.index(n)
        assert nll.methods["angular"].score[index] == pytest.approx(sum(ref["nll"]) / len(windows), abs=2e-5)
        kl = result.tasks["corpus"]["kl"].methods["angular"]
        assert kl.delta[index] == pytest.approx(sum(ref["kl"]) / len(windows), abs=2e-5)
        assert kl.delta_stderr[index] is not None and kl.delta_stderr[index] > 0
    again = load_result(tmp_path / "prune_curve.json")  # validated on read, round trip
    assert isinstance(again, PruneCurveResult) and again.to_dict() == result.to_dict()


def test_angular_of_another_model_refused_before_loading(tiny_checkpoints, tmp_path, monkeypatch):
    measured = run_angular(AngularSpec(ModelSpec(str(tiny_checkpoints["gpt2"]), device="cpu"), CORPUS))
    write_json(tmp_path / "angular.json", measured.to_dict())
    import layerprobe.model.load

    monkeypatch.setattr(layerprobe.model.load, "load_model", lambda *a, **k: pytest.fail("weights loaded"))
    args = ["prune-curve", str(tiny_checkpoints["llama"]), "--task", "corpus", "--out", str(tmp_path), "-q"]
    result = runner.invoke(app, [*args, "--angular", str(tmp_path / "angular.json")])
    assert result.exit_code == 2 and "measured" in result.output, result.output
    result = runner.invoke(app, [*args, "--max-fraction", "0.1"])  # ⌊0.1·4⌋ = 0 blocks
    assert result.exit_code == 2 and "removes none" in result.output, result.output
    result = runner.invoke(app, ["prune-curve", str(tiny_checkpoints["bert"]), "--task", "corpus", "-q"])
    assert result.exit_code == 2 and "causal LM" in result.output, result.output


def test_prune_curve_cli_end_to_end(tiny_checkpoints, tmp_path):
    args = [str(tiny_checkpoints["llama"]), "--task", "corpus", "--dataset", BUILTIN_CORPUS, "--tokens", "48"]
    args += ["--seq-len", "16", "--device", "cpu", "--baseline-seeds", "2", "--out", str(tmp_path), "-q"]
    result = runner.invoke(app, ["prune-curve", *args])
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "prune_curve.json").read_text())
    assert data["schema"] == "layerprobe/prune-curve@1" and data["settings"]["baseline_seeds"] == [1234, 1235]
    methods = data["tasks"]["corpus"]["top1_agreement"]["methods"]
    assert sorted(methods) == ["angular", "last", "random_1234", "random_1235"]
    assert all(m["n"] == [1, 2] for m in methods.values())
    assert (tmp_path / "prune_curve_corpus.png").stat().st_size > 1000
    (tmp_path / "prune_curve_corpus.png").unlink()
    assert runner.invoke(app, ["plot", str(tmp_path / "prune_curve.json")]).exit_code == 0
    assert (tmp_path / "prune_curve_corpus.png").exists()


def test_prune_drop_corpus_cli(tiny_checkpoints, tmp_path):
    args = [str(tiny_checkpoints["llama"]), "--task", "corpus", "--dataset", BUILTIN_CORPUS, "--tokens", "48"]
    result = runner.invoke(app, ["prune-drop", *args, "--seq-len", "16", "--device", "cpu", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "prune_drop.json").read_text())
    metrics = data["tasks"]["corpus"]["metrics"]
    assert set(metrics) == {"nll", "perplexity", "kl", "top1_agreement"}
    assert metrics["kl"]["baseline"] == pytest.approx(0, abs=1e-6) and metrics["top1_agreement"]["baseline"] == 1
    assert all(s is not None for s in metrics["nll"]["delta_stderr"])
    assert data["settings"]["corpus"]["tokens"] == 48


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


def test_prune_curve_scores_squad_from_a_local_file(tiny_checkpoints, tmp_path):
    from tests.evaluate.test_squad import _official_json

    squad = tmp_path / "dev-v1.1.json"
    squad.write_text(json.dumps(_official_json()), encoding="utf-8")
    args = [str(tiny_checkpoints["bert_qa"]), "--task", "squad", "--squad-data", str(squad), "--limit", "4"]
    args += ["--dataset", BUILTIN_CORPUS, "--tokens", "48", "--seq-len", "16", "--device", "cpu", "-q"]
    result = runner.invoke(app, ["prune-curve", *args, "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "out" / "prune_curve.json").read_text())
    assert set(data["tasks"]["squad"]) >= {"exact_match", "f1"}
    missing = runner.invoke(app, ["prune-curve", *args[:4], str(tmp_path / "none.json"), *args[5:]])
    assert missing.exit_code == 2 and "none.json" in missing.output, missing.output
