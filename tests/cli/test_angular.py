"""`layerprobe angular`: a run's JSON, figures and summary; bad input is one line, exit 2, nothing written."""

from __future__ import annotations

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
