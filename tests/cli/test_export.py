"""`layerprobe prune`: writes the pruned checkpoint, refuses an occupied destination or zeroed sublayers."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from layerprobe.cli.app import app
from layerprobe.results import ExportPlaces, RunDir


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


# Runs `layerprobe prune` and stops it at a point of the replacement, where the test kills it with SIGKILL.
PAUSING_PRUNE = """
import os, sys, time
from pathlib import Path
import layerprobe.export.place as place
from layerprobe.cli.app import app

point, destination = sys.argv[1], Path(sys.argv[2]).absolute()
real_replace, real_sync = os.replace, place.sync_tree

def pause():
    print("paused", flush=True)
    time.sleep(600)

def sync(directory):
    real_sync(directory)
    if point == "written":
        pause()

def replace(source, target):
    if (point == "between" and Path(target) == destination) or (point == "trash" and "-trash-" in str(target)):
        pause()
    return real_replace(source, target)

place.sync_tree, os.replace = sync, replace
sys.argv = ["layerprobe", *sys.argv[3:]]
app()
"""


def _environment():
    return {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "COLUMNS": "250"}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("point", "note", "removed"),
    [
        ("written", "left by an export that was killed", [1]),
        ("between", "restored", [1]),
        ("trash", "the checkpoint an earlier export had replaced", [1, 2]),
    ],
)
def test_prune_killed_while_replacing_save_is_recovered_by_the_next_run(export_sources, tmp_path, point, note, removed):
    source, out = str(export_sources("llama")), tmp_path / "out"
    assert CliRunner().invoke(app, ["prune", source, "--remove", "1", "--save", str(out), "-q"]).exit_code == 0
    args = ["prune", source, "--remove", "1-2", "--save", str(out), "--overwrite", "-q"]
    child = subprocess.Popen(
        [sys.executable, "-c", PAUSING_PRUNE, point, str(out), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_environment(),
    )
    try:
        assert child.stdout.readline().strip() == "paused", child.stderr.read()
    finally:
        child.kill()  # SIGKILL: no handler, no finally runs in the child
        child.communicate()
    whole = out if out.exists() else ExportPlaces(out).backup
    assert json.loads(RunDir(whole).export_record.read_text())["removed_blocks"] == removed
    result = CliRunner().invoke(app, ["prune", source, "--remove", "3", "--save", str(out), "--overwrite", "-q"])
    assert result.exit_code == 0, result.output
    notes = [line for line in result.output.splitlines() if line.startswith("note:")]
    assert any(note in line for line in notes), result.output
    assert json.loads(RunDir(out).export_record.read_text())["removed_blocks"] == [3]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def _file_size_limit(limit: int):
    def apply():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # write() then fails with EFBIG instead of killing
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


@pytest.mark.slow
def test_prune_under_a_file_size_limit_is_one_line(export_sources, tmp_path):
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "layerprobe", "prune", str(export_sources("llama")), "--remove", "1"]
        + ["--save", str(out), "-q"],
        capture_output=True,
        text=True,
        env=_environment(),
        preexec_fn=_file_size_limit(60_000),
        timeout=300,
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith("error: ") and "file too large" in lines[0], done.stderr
    assert "needs about" in lines[0] and "--max-shard-size" in lines[1] and "Traceback" not in done.stderr
    assert list(tmp_path.iterdir()) == []
