"""A full disk while a run writes its JSON, its figures or its answer journal: one line, exit 2, earlier files intact.

ENOSPC is simulated where the file is written (the temporary file of an atomic write, a figure's savefig, the
journal's open), so everything before it is real; the test then reads the run directory as the user would.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import matplotlib.figure
import pytest
from factories import PRUNE_SETTINGS, TASKS_DIR
from typer.testing import CliRunner

import layerprobe.evaluate.journal as journal
from layerprobe.cli.app import app

runner = CliRunner()
ANGULAR = ["--dataset", "builtin:pydoc", "--tokens", "300", "--seq-len", "64", "--quiet"]


def _full(path: object) -> OSError:
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))


def _one_line(output: str, says: str) -> None:
    assert "Traceback" not in output and says in output and "no space left on the device" in output
    assert "Free some space" in output


@pytest.mark.slow  # a real run of the command (> 2.5 s on 2 cores)
def test_a_full_disk_writing_angular_json_is_one_line_and_keeps_the_old_file(tiny_checkpoints, tmp_path, monkeypatch):
    (tmp_path / "angular.json").write_text("an earlier run's result")
    real = Path.write_text

    def write_text(self, *args, **kwargs):
        if self.name.startswith(".angular.json."):
            raise _full(self)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", write_text)
    done = runner.invoke(app, ["angular", str(tiny_checkpoints["llama"]), *ANGULAR, "--out", str(tmp_path)])
    assert done.exit_code == 2, done.output
    _one_line(done.output, "angular.json")
    assert (tmp_path / "angular.json").read_text() == "an earlier run's result"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["angular.json"]  # no temporary file left


@pytest.mark.slow  # a real run of the command (> 2.5 s on 2 cores)
def test_a_full_disk_drawing_the_plots_is_one_line_and_keeps_the_json(tiny_checkpoints, tmp_path, monkeypatch):
    def savefig(self, target, *args, **kwargs):
        raise _full(target)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", savefig)
    done = runner.invoke(app, ["angular", str(tiny_checkpoints["llama"]), *ANGULAR, "--out", str(tmp_path)])
    assert done.exit_code == 2, done.output
    _one_line(done.output, "angular.png")
    assert (tmp_path / "angular.json").read_text().startswith("{")  # written before the figures, intact
    assert sorted(p.name for p in tmp_path.iterdir()) == ["angular.json"]


@pytest.mark.slow  # a real run of the command (> 2.5 s on 2 cores)
def test_a_full_disk_opening_the_answer_journal_is_one_line(tiny_checkpoints, tmp_path, monkeypatch):
    def full_open(path, *args, **kwargs):
        if "answers" in str(path):
            raise _full(path)
        return open(path, *args, **kwargs)

    monkeypatch.setattr(journal, "open", full_open, raising=False)
    args = ["prune-drop", str(tiny_checkpoints["llama"]), "--task", "lp_arc_like", "--include-path", str(TASKS_DIR)]
    args += ["--layers", "0", "--limit", "2", "--batch-size", str(PRUNE_SETTINGS["batch_size"]), "--engine", "shared"]
    done = runner.invoke(app, [*args, "--device", "cpu", "--quiet", "--out", str(tmp_path)])
    assert done.exit_code == 2, done.output
    _one_line(done.output, "prune_drop.answers")
