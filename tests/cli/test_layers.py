"""`layerprobe layers`: the stack layerprobe found (path, L, sizes, module paths, norm placement), read
without the weights; a config that disagrees with the weights is refused."""

from __future__ import annotations

import transformers as tf
from factories import build_checkpoint, copy_with_config
from typer.testing import CliRunner

from layerprobe.cli.app import app

runner = CliRunner()


def test_layers_command(tiny_checkpoints):
    result = runner.invoke(app, ["layers", str(tiny_checkpoints["gpt2"])])
    assert result.exit_code == 0, result.output
    assert "stack path: h" in result.output and "L = 4" in result.output and "GPT2Block" in result.output
    real = tf.AutoModel.from_pretrained(tiny_checkpoints["gpt2"])  # the listing is built without weights
    expected = sum(p.numel() for p in real.h.parameters())
    assert f"parameters in blocks: {expected:,}" in " ".join(result.output.split())
    # The attention and MLP module paths prune-drop --unit would zero, found by tracing (GPT-2: attn, mlp).
    rows = [line.split("│") for line in result.output.splitlines() if "│" in line and "GPT2Block" in line]
    assert len(rows) == 4 and all([c.strip() for c in row[-3:-1]] == ["attn", "mlp"] for row in rows), rows


def test_layers_command_prints_placement(tmp_path):
    path = build_checkpoint("llama", tmp_path / "llama", num_layers=3)
    result = CliRunner().invoke(app, ["layers", str(path)])
    assert result.exit_code == 0, result.output
    assert result.output.count("Pre-LN") == 4  # three rows and the summary
    assert "placement: Pre-LN in all 3 blocks" in result.output
    quiet = CliRunner().invoke(app, ["layers", str(path), "--no-placement"])
    assert quiet.exit_code == 0 and "Pre-LN" not in quiet.output


def test_layers_command_refuses_a_config_that_disagrees_with_the_weights(tiny_checkpoints, tmp_path):
    good = CliRunner().invoke(app, ["layers", str(tiny_checkpoints["llama"])])
    assert good.exit_code == 0 and "L = 4" in good.output
    path = copy_with_config(tiny_checkpoints["llama"], tmp_path / "ckpt", num_hidden_layers=6)
    result = CliRunner().invoke(app, ["layers", str(path)])
    assert result.exit_code == 2 and "4, 5 would be randomly initialised" in result.output
    assert "Traceback" not in result.output
