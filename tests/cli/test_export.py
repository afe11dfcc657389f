"""`layerprobe prune`: writes the pruned checkpoint, refuses an occupied destination or zeroed sublayers."""

from __future__ import annotations

from typer.testing import CliRunner

from layerprobe.cli.app import app


def test_cli_prune(export_sources, tmp_path):
    runner = CliRunner()
    out, merge = tmp_path / "out", tmp_path / "merge.yaml"
    result = runner.invoke(
        app,
        [
            "prune",
            str(export_sources("llama")),
            "--remove",
            "4-5",
            "--save",
            str(out),
            "--mergekit-yaml",
            str(merge),
            "-q",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "6 → 4 blocks" in result.output and (out / "model.safetensors").is_file() and merge.is_file()
    again = runner.invoke(app, ["prune", str(export_sources("llama")), "--remove", "1", "--save", str(out), "-q"])
    assert again.exit_code == 2 and "--overwrite" in again.output
    refused = runner.invoke(
        app, ["prune", str(export_sources("llama")), "--remove-mlp", "1", "--save", str(tmp_path / "x")]
    )
    assert refused.exit_code == 2 and "zeroed weights" in refused.output


def test_cli_prune_help_lists_every_option():
    result = CliRunner().invoke(app, ["prune", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    for option in (
        "--remove",
        "--remove-attention",
        "--remove-mlp",
        "--save",
        "--overwrite",
        "--mergekit-yaml",
        "--max-shard-size",
        "--revision",
        "--dtype",
        "--trust-remote-code",
        "--layers-path",
        "--quiet",
    ):
        assert option in result.output
