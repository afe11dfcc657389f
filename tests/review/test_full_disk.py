"""A full disk under `report`, `track` and `stability` (issue 26 §4): one line, exit 2, nothing half-written."""

from __future__ import annotations

import errno
import pathlib

import pytest
from typer.testing import CliRunner

from layerprobe.cli.app import app
from layerprobe.core import FULL_DISK_HINT

runner = CliRunner()


def full_disk(monkeypatch):
    def write_text(self, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(pathlib.Path, "write_text", write_text)
    monkeypatch.setattr(pathlib.Path, "write_bytes", write_text)


@pytest.mark.slow  # builds the review runs (about 30 s) for three one-line checks
@pytest.mark.parametrize("command", ["report", "track", "stability"])
def test_a_full_disk_is_one_line_and_status_2(review_runs, tmp_path, monkeypatch, command):
    run = review_runs.by_step[1000]
    out = tmp_path / "out"
    args = {
        "report": ["report", str(run), "--out", str(out / "page.html"), "-q"],
        "track": ["track", *map(str, review_runs.scrambled), "--out", str(out), "--no-plot"],
        "stability": ["stability", str(run / "angular.json"), str(run / "prune_drop.json"), "--out", str(out)],
    }[command]
    full_disk(monkeypatch)
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and result.exception is None or isinstance(result.exception, SystemExit)
    assert "no space left on the device" in result.output and "Nothing was half-written" in result.output
    assert f"Cannot write {out}" in result.output  # the file asked for, not a temporary name
    assert f"hint: {FULL_DISK_HINT}" in result.output
    assert not out.exists() or not any(p.is_file() for p in out.rglob("*"))
