"""`layerprobe depth`: the JSON and figure of a run, `plot` and `compare` on it, and refusals with exit 2."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from layerprobe.cli.app import app
from layerprobe.core import BUILTIN_CORPUS
from layerprobe.results import write_json
from layerprobe.results.io import DEPTH_SCHEMA

runner = CliRunner()
SMALL = ["--dataset", BUILTIN_CORPUS, "--tokens", "64", "--seq-len", "32"]  # two windows of the builtin corpus


@pytest.mark.slow  # over 2.5 s on 2 cores: the default tier stays under 3 minutes
def test_cli_writes_depth_json_and_figure(three_block_checkpoints, tmp_path):
    """The quick CLI check of the default run; the slow one below adds --grad, `plot` and `compare`."""
    args = ["depth", str(three_block_checkpoints["bert"]), *SMALL]
    res = runner.invoke(app, [*args, "--positions", "last", "--out", str(tmp_path), "-q"])
    assert res.exit_code == 0, res.output
    data = json.loads((tmp_path / "depth.json").read_text())
    assert data["schema"] == DEPTH_SCHEMA and data["placement"]["pattern"] == "Post-LN"
    assert data["data"]["positions"] == "last" and data["data"]["positions_averaged"] == 2
    assert data["grad"] is None and (tmp_path / "depth.png").is_file()
    assert "Post-LN in all 3 blocks" in res.output


@pytest.mark.slow
def test_cli_end_to_end_on_a_tiny_model_with_plot_and_compare(three_block_checkpoints, tmp_path):
    out = tmp_path / "run"
    args = [
        "depth",
        str(three_block_checkpoints["llama"]),
        "--dataset",
        BUILTIN_CORPUS,
        "--tokens",
        "128",
        "--seq-len",
        "32",
    ]
    res = runner.invoke(app, [*args, "--grad", "--out", str(out), "-q"])
    assert res.exit_code == 0, res.output
    data = json.loads((out / "depth.json").read_text())
    assert data["schema"] == DEPTH_SCHEMA and data["model"]["num_layers"] == 3
    assert len(data["residual"]["rms"]["mean"]) == 4 and len(data["update"]["relative"]["mean"]) == 3
    assert data["placement"]["labels"] == ["Pre-LN"] * 3 and data["grad"]["loss"] == "next-token"
    assert set(data["sublayers"]) == {"attention", "mlp"} and len(data["grad"]["block"]) == 3
    assert (out / "depth.png").stat().st_size > 10_000 and (out / "depth.pdf").is_file()
    assert "Pre-LN in all 3 blocks" in res.output
    (out / "depth.png").unlink()
    res = runner.invoke(app, ["plot", str(out / "depth.json")])
    assert res.exit_code == 0, res.output
    assert (out / "depth.png").is_file()
    # compare: identical runs pass; a candidate whose residual grows 3× more fails
    res = runner.invoke(app, ["compare", str(out / "depth.json"), str(out / "depth.json"), "--no-plot"])
    assert res.exit_code == 0, res.output
    grown = json.loads((out / "depth.json").read_text())
    for field in ("mean", "std", "min", "max"):  # the last state's RMS tripled at every position: a consistent file
        grown["residual"]["rms"][field][-1] *= 3
    grown["summary"] = {}
    write_json(tmp_path / "grown.json", grown)
    res = runner.invoke(app, ["compare", str(out / "depth.json"), str(tmp_path / "grown.json"), "--no-plot"])
    assert res.exit_code == 1, res.output
    assert "rms_growth" in res.output


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--positions", "middle"], "Invalid value for '--positions'"),
        (["--tokens", "0"], "--tokens must be positive"),
        (["--batch-size", "0"], "--batch-size must be positive"),
    ],
)
def test_cli_bad_inputs_exit_2(three_block_checkpoints, tmp_path, extra, message):
    res = runner.invoke(
        app,
        ["depth", str(three_block_checkpoints["llama"]), "--dataset", BUILTIN_CORPUS, *extra, "--out", str(tmp_path)],
    )
    assert res.exit_code == 2
    assert message in res.output


def test_grad_refuses_an_encoder_without_its_masked_lm_head(three_block_checkpoints, tmp_path):
    res = runner.invoke(app, ["depth", str(three_block_checkpoints["bert"]), *SMALL, "--grad", "--out", str(tmp_path)])
    assert res.exit_code == 2
    assert "no trained masked-LM head" in res.output
    assert not (tmp_path / "depth.json").exists()


@pytest.mark.slow
def test_real_minilm_end_to_end(minilm, tmp_path):
    res = runner.invoke(
        app,
        [
            "depth",
            str(minilm),
            "--dataset",
            BUILTIN_CORPUS,
            "--tokens",
            "1024",
            "--seq-len",
            "128",
            "--out",
            str(tmp_path),
            "-q",
        ],
    )
    assert res.exit_code == 0, res.output
    data = json.loads((tmp_path / "depth.json").read_text())
    assert data["placement"]["summary"] == "Post-LN in all 6 blocks"
    assert data["sublayers"]["attention"]["modules"] == ["attention.output.dense"] * 6
    assert data["grad"] is None and data["data"]["positions_averaged"] == 1024
    assert all(v > 0 for v in data["residual"]["rms"]["mean"])
    assert (tmp_path / "depth.png").is_file()
    res = runner.invoke(
        app, ["depth", str(minilm), "--dataset", BUILTIN_CORPUS, "--tokens", "64", "--grad", "--out", str(tmp_path)]
    )
    assert res.exit_code == 2 and "masked-LM head" in res.output
