"""`layerprobe plot`: a result's figures redrawn from its JSON."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from layerprobe.cli.app import app

runner = CliRunner()


@pytest.mark.slow  # over 2.5 s on 2 cores: the default tier stays under 3 minutes
def test_plot_redraws_from_json(tiny_checkpoints, tmp_path):
    angular = ["angular", str(tiny_checkpoints["bert"]), "--tokens", "300", "--dataset", "builtin:pydoc", "--quiet"]
    assert runner.invoke(app, [*angular, "--out", str(tmp_path)]).exit_code == 0
    (tmp_path / "angular.png").unlink()
    redraw = tmp_path / "redraw"
    result = runner.invoke(app, ["plot", str(tmp_path / "angular.json"), "--out", str(redraw)])
    assert result.exit_code == 0, result.output
    assert (redraw / "angular.png").exists()
