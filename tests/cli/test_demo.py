"""`layerprobe demo`: the real MiniLM offline, named for what it is."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from layerprobe.cli.app import app

runner = CliRunner()


def test_demo_runs_offline_on_real_minilm(minilm, tmp_path):
    result = runner.invoke(app, ["demo", "--tokens", "1024", "--quiet", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "angular.json").read_text())
    assert data["model"]["num_layers"] == 6 and data["data"]["dataset"] == "builtin:pydoc"
    assert data["data"]["tokens"] == 1024


def test_demo_is_named_minilm_with_its_path_kept(minilm, tmp_path):
    result = runner.invoke(app, ["demo", "--tokens", "512", "--quiet", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "angular.json").read_text())
    assert data["model"]["id"] == "all-MiniLM-L6-v2"
    assert Path(data["model"]["path"]).is_dir() and (Path(data["model"]["path"]) / "config.json").is_file()
    assert result.output.startswith("all-MiniLM-L6-v2: d(x^l, x^(l+1))")
    assert data["model"]["path"] not in result.output.split("wrote")[0]
