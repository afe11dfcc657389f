import json
import re

import pytest
from typer.testing import CliRunner

from layerprobe.cli.app import app

runner = CliRunner()


def _angular(args, tmp_path):
    return runner.invoke(app, ["angular", *args, "--dataset", "builtin:pydoc", "--quiet", "--out", str(tmp_path)])


def test_angular_end_to_end(tiny_checkpoints, tmp_path):
    result = _angular(
        [
            str(tiny_checkpoints["llama"]),
            "--tokens",
            "600",
            "--seq-len",
            "128",
            "--positions",
            "last",
            "--batch-size",
            "2",
        ],
        tmp_path,
    )
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "angular.json").read_text())
    assert data["schema"] == "layerprobe/angular@1"
    assert data["model"]["num_layers"] == 4 and data["model"]["layer_path"] == "layers"
    assert data["model"]["architecture"] == "LlamaForCausalLM" and data["model"]["kind"] == "causal-lm"
    assert data["data"]["tokens"] == 600 and data["data"]["positions"] == "last"
    assert data["data"]["positions_averaged"] == data["data"]["windows"] == 5
    assert len(data["distance"]) == 5 and all(len(row) == 5 for row in data["distance"])
    assert data["summary"]["adjacent"] == [data["distance"][l][l + 1] for l in range(4)]
    for name in ("angular.png", "angular.pdf"):
        assert (tmp_path / name).stat().st_size > 1000
    assert "most similar adjacent pair" in result.output
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp files left


def test_layers_command(tiny_checkpoints):
    result = runner.invoke(app, ["layers", str(tiny_checkpoints["gpt2"])])
    assert result.exit_code == 0, result.output
    assert "stack path: h" in result.output and "L = 4" in result.output and "GPT2Block" in result.output
    import transformers as tf

    real = tf.AutoModel.from_pretrained(tiny_checkpoints["gpt2"])  # the listing is built without weights
    expected = sum(p.numel() for p in real.h.parameters())
    assert f"parameters in blocks: {expected:,}" in " ".join(result.output.split())
    # The attention and MLP module paths prune-drop --unit would zero, found by tracing (GPT-2: attn, mlp).
    rows = [line.split("│") for line in result.output.splitlines() if "│" in line and "GPT2Block" in line]
    assert len(rows) == 4 and all([c.strip() for c in row[-3:-1]] == ["attn", "mlp"] for row in rows), rows


def test_plot_redraws_from_json(tiny_checkpoints, tmp_path):
    assert _angular([str(tiny_checkpoints["bert"]), "--tokens", "300"], tmp_path).exit_code == 0
    (tmp_path / "angular.png").unlink()
    redraw = tmp_path / "redraw"
    result = runner.invoke(app, ["plot", str(tmp_path / "angular.json"), "--out", str(redraw)])
    assert result.exit_code == 0, result.output
    assert (redraw / "angular.png").exists()


def test_demo_runs_offline_on_real_minilm(minilm, tmp_path):
    result = runner.invoke(app, ["demo", "--tokens", "1024", "--quiet", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "angular.json").read_text())
    assert data["model"]["num_layers"] == 6 and data["data"]["dataset"] == "builtin:pydoc"
    assert data["data"]["tokens"] == 1024


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["{missing}"], "No model directory"),
        (["{llama}", "--tokens", "5000000"], "text tokens"),
        (["{llama}", "--positions", "first"], "'first' is not one of 'all', 'last'"),
        (["{llama}", "--dtype", "float8"], "'float8' is not one of 'auto', 'float32'"),
        (["{llama}", "--device", "tpu"], "Unknown --device"),
        (["{llama}", "--layers-path", "model.nothing"], "does not exist"),
        (["{llama}", "--tokens", "0"], "--tokens must be positive"),
        (["{llama}", "--batch-size", "0"], "--batch-size must be positive"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tiny_checkpoints, tmp_path, args, message):
    args = [a.format(missing=str(tmp_path / "nope"), llama=str(tiny_checkpoints["llama"])) for a in args]
    out = tmp_path / "out"
    result = runner.invoke(app, ["angular", *args, "--dataset", "builtin:pydoc", "--quiet", "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert message in " ".join(re.sub("[│╭╮╰╯─]", " ", result.output).split()) and "Traceback" not in result.output
    assert not out.exists() or not any(out.iterdir())


def test_bad_corpus_file(tiny_checkpoints, tmp_path):
    missing = tmp_path / "corpus.jsonl"
    result = runner.invoke(
        app,
        [
            "angular",
            str(tiny_checkpoints["llama"]),
            "--dataset",
            str(missing),
            "--quiet",
            "--out",
            str(tmp_path / "out"),
        ],
    )
    assert result.exit_code == 2 and "No corpus file" in result.output


def test_unreachable_hub_model_is_a_clear_error(tmp_path):
    result = runner.invoke(app, ["angular", "no-such-org/no-such-model", "--quiet", "--out", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert "no-such-org/no-such-model" in result.output and "Traceback" not in result.output


def test_help_documents_every_option():
    result = runner.invoke(app, ["angular", "--help"])
    for option in (
        "--tokens",
        "--positions",
        "--dataset",
        "--dataset-config",
        "--split",
        "--text-field",
        "--seq-len",
        "--batch-size",
        "--revision",
        "--dtype",
        "--device",
        "--device-map",
        "--trust-remote-code",
        "--layers-path",
        "--out",
        "--quiet",
    ):
        assert option in result.output
