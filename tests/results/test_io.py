"""Files are written through results/io.py (atomically, leaving nothing half-written) and every schema is
registered there, once."""

from __future__ import annotations

import ast
import errno
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from source_code import PACKAGE, string_literals

import layerprobe.results.io as results_io
from layerprobe.core import OutputError, ResultError
from layerprobe.results import atomic_write, read_json, write_json, write_json_lines, write_text
from layerprobe.results.io import SCHEMAS, check_schema, remove_stale_temp_files, schema_family
from layerprobe.results.validate import Node

ROOT = PACKAGE.parent
IO = PACKAGE / "results" / "io.py"
# The shared engine's answer journal appends fsynced lines to a file it creates: append-only, never replaced.
APPEND_ONLY = {PACKAGE / "evaluate" / "journal.py"}


def calls(path: Path):
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call):
            yield node


def test_every_writer_goes_through_results_io():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == IO:
            continue
        for call in calls(path):
            func = call.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            mode = (
                call.args[1] if len(call.args) > 1 else next((k.value for k in call.keywords if k.arg == "mode"), None)
            )
            writes = isinstance(mode, ast.Constant) and isinstance(mode.value, str) and "w" in mode.value
            if (name == "open" and writes and path not in APPEND_ONLY) or name in ("write_text", "write_bytes", "dump"):
                if name == "write_text" and isinstance(func, ast.Name):
                    continue  # results.io's own write_text
                found.append(f"{path.relative_to(PACKAGE.parent)}:{call.lineno}: {name}")
    assert found == [], "write files with results.io (write_json, write_text, write_json_lines, atomic_write)"


def test_every_schema_is_registered_in_io_only():
    spelled = [
        f"{path.relative_to(PACKAGE.parent)}:{line}: {text}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path != IO
        for line, text in string_literals(ast.parse(path.read_text(encoding="utf-8")))
        if re.match(r"^layerprobe/[\w-]+@\d+$", text)
    ]
    assert spelled == []
    assert len(set(SCHEMAS)) == len(SCHEMAS) and len({schema_family(s) for s in SCHEMAS}) == len(SCHEMAS)


def test_check_schema_names_the_file_and_both_schemas():
    with pytest.raises(ResultError, match=r"^a\.json: expected a layerprobe/depth@1 result, got schema 'x'\.$"):
        check_schema(Node({"schema": "x"}, "a.json"), "layerprobe/depth@1")
    with pytest.raises(ResultError, match="the top level must be an object, got an array of 0 items"):
        check_schema(Node([], "a.json"), "layerprobe/depth@1")


def test_writers_leave_only_the_file(tmp_path):
    write_json(tmp_path / "a.json", {"schema": "layerprobe/angular@1", "x": float("nan")})
    assert read_json(tmp_path / "a.json")["schema"] == "layerprobe/angular@1"
    write_text(tmp_path / "deep" / "b.txt", "text")
    write_json_lines(tmp_path / "c.jsonl", [{"a": 1}, {"b": None}])
    assert (tmp_path / "c.jsonl").read_text() == '{"a": 1}\n{"b": null}\n'
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["a.json", "b.txt", "c.jsonl", "deep"]


def test_temp_files_of_a_killed_writer_are_removed_by_the_next_write(tmp_path):
    script = textwrap.dedent(
        f"""
        import time
        from pathlib import Path
        from layerprobe.results import atomic_write

        def slow(tmp):
            tmp.write_text("half")
            print("writing", flush=True)
            time.sleep(60)

        atomic_write(Path({str(tmp_path)!r}) / "angular.json", slow)
        """
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    writer = subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, text=True)
    assert writer.stdout.readline().strip() == "writing"
    live = [p.name for p in tmp_path.iterdir()]
    assert len(live) == 1 and live[0].startswith(".angular.json.") and live[0].endswith(".tmp")
    assert remove_stale_temp_files(tmp_path) == []  # held by a live writer: kept
    writer.send_signal(signal.SIGKILL)
    writer.wait(timeout=30)
    assert (tmp_path / live[0]).exists()  # no finally ran: SIGKILL leaves it
    old_style = tmp_path / ".prune_drop.json.0a1b2c3d.tmp"  # an earlier version's name, from before this process
    old_style.write_text("x")
    os.utime(old_style, (time.time() - 3600, time.time() - 3600))
    unrelated = tmp_path / ".notes.tmp"
    unrelated.write_text("mine")
    results_io._CLEANED.discard(tmp_path.resolve())
    write_json(tmp_path / "angular.json", {"schema": "x"})
    assert sorted(p.name for p in tmp_path.iterdir()) == [".notes.tmp", "angular.json"]


def test_atomic_write_leaves_nothing_behind_when_writing_fails(tmp_path):
    target = tmp_path / "kept.json"
    target.write_text("old")

    def half_then_fail(tmp):
        tmp.write_text("half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        atomic_write(target, half_then_fail)
    assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["kept.json"]


def test_temp_files_whose_pid_was_reused_are_removed_by_the_next_write(tmp_path):
    """A killed run's pid now belongs to this process (a container restarts at the same pid) or to a
    process that started after the file was written: the file has no writer, so the next write removes it."""
    ours = tmp_path / f".angular.json.{os.getpid()}-0a1b2c3d.tmp"  # same pid as this process, not being written
    ours.write_text("half")
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        reused = tmp_path / f".depth.json.{sleeper.pid}-0a1b2c3d.tmp"
        reused.write_text("half")
        os.utime(reused, (time.time() - 3600, time.time() - 3600))  # written long before the sleeper started
        held = tmp_path / f".prune_drop.json.{sleeper.pid}-1a2b3c4d.tmp"
        held.write_text("being written")  # written after the sleeper started: it may be its file
        other = tmp_path / ".notes.12-0a1b2c3d.txt"  # not our pattern
        other.write_text("x")
        results_io._CLEANED.discard(tmp_path.resolve())
        write_json(tmp_path / "angular.json", {"schema": "x"})
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted([held.name, other.name, "angular.json"])
    finally:
        sleeper.kill()
        sleeper.wait(timeout=30)


def test_a_write_in_progress_keeps_its_own_temp_file(tmp_path):
    seen = []

    def inner(tmp):
        tmp.write_text("half")
        results_io._CLEANED.discard(tmp_path.resolve())
        write_json(tmp_path / "other.json", {"schema": "x"})  # a nested write into the same directory
        seen.append(tmp.exists())

    atomic_write(tmp_path / "angular.json", inner)
    assert seen == [True] and sorted(p.name for p in tmp_path.iterdir()) == ["angular.json", "other.json"]


def test_a_place_that_cannot_be_written_is_one_output_error_and_leaves_nothing(tmp_path):
    (tmp_path / "a_file").write_text("in the way")
    with pytest.raises(OutputError, match="Cannot write") as caught:
        write_text(tmp_path / "a_file" / "report.xml", "x")
    assert caught.value.reason and caught.value.exit_code == 2
    target = tmp_path / "kept.json"

    def refused(tmp):
        tmp.write_text("half")
        raise PermissionError(errno.EACCES, "Permission denied", str(tmp))

    with pytest.raises(OutputError, match="Permission denied"):
        atomic_write(target, refused)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file"]

    def full(tmp):
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(OutputError, match="kept.json: no space left on the device") as caught_full:
        atomic_write(target, full)
    assert caught_full.value.__cause__.errno == errno.ENOSPC  # kept: the export says how much it needed
    assert "Free some space" in caught_full.value.hint
