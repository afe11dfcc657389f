"""`layerprobe plot` draws every kind layerprobe writes (issue 26 §4): stability.json and track.json too."""

from __future__ import annotations

import pytest
from drawn import PDF_MAGIC, PNG_MAGIC, file_magic
from typer.testing import CliRunner

from layerprobe.cli.app import app

runner = CliRunner()


def invoke(*args):
    result = runner.invoke(app, [*map(str, args)])
    assert result.exit_code == 0, result.output
    return result


@pytest.mark.slow
@pytest.mark.usefixtures("no_leaked_figures")
def test_plot_redraws_a_history_and_a_stability_result(review_runs, tmp_path):
    invoke("track", *review_runs.scrambled, "--out", tmp_path / "t", "--no-plot")
    invoke("plot", tmp_path / "t" / "track.json", "--out", tmp_path / "tp")
    drawn = sorted(p.name for p in (tmp_path / "tp").iterdir())
    assert "track_lazy.png" in drawn and "track_lazy.pdf" in drawn and len(drawn) >= 4
    run = review_runs.by_step[1000]
    invoke("stability", run / "angular.json", run / "prune_drop.json", "--out", tmp_path / "s", "--no-plot")
    assert not (tmp_path / "s" / "stability.png").exists()
    invoke("plot", tmp_path / "s" / "stability.json")
    for name, magic in (("stability.png", PNG_MAGIC), ("stability.pdf", PDF_MAGIC)):
        assert file_magic(tmp_path / "s" / name, magic)
    for path in (tmp_path / "tp").iterdir():
        assert file_magic(path, PDF_MAGIC if path.suffix == ".pdf" else PNG_MAGIC)
