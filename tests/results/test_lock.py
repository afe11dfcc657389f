"""The --out lock: a second run into a run directory refuses with one line naming the first, a killed holder's lock
is stale, and a command gives its lock back (and the folders it made) when it ends.

The holder is a real second process (the kernel's flock is per open file, so a lock in this process would not
show what another process sees); the refused run is the real command line.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap

import pytest
from typer.testing import CliRunner

import layerprobe.results.lock as lock
from layerprobe.cli.app import app
from layerprobe.core import OutputError
from layerprobe.results import RunDir, hold_run_dir, release_run_dirs

HOLDER = textwrap.dedent(
    """
    import sys
    from layerprobe.results import hold_run_dir, release_run_dirs
    hold_run_dir(sys.argv[1])
    print("held", flush=True)
    sys.stdin.read()  # until the test closes our stdin (or kills us)
    release_run_dirs()
    """
)


def _holder(out):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    child = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(out)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True
    )
    assert child.stdout.readline().strip() == "held"
    return child


def _merge_into(out, tmp_path):
    """A command that takes the --out lock before reading anything (its shard does not exist)."""
    return CliRunner().invoke(app, ["merge", str(tmp_path / "no-shard"), "--out", str(out)])


@pytest.mark.slow  # starts a second Python process that imports layerprobe
def test_a_second_run_into_a_locked_out_refuses_naming_the_first_and_a_killed_one_is_stale(tmp_path):
    out = tmp_path / "out"
    child = _holder(out)
    try:
        refused = _merge_into(out, tmp_path)
        assert refused.exit_code == 2, refused.output
        flat = " ".join(refused.output.split())
        assert f"is in use by another layerprobe run: process {child.pid} on host {socket.gethostname()}" in flat
        assert "Wait for that run to finish, or pass another --out" in flat
        assert "Traceback" not in refused.output
    finally:
        child.kill()  # SIGKILL: no finally, no cleanup; the lock file stays behind
        child.wait()
    assert RunDir(out).lock_file().exists()
    after = _merge_into(out, tmp_path)  # the kernel let go of the dead holder's lock: not refused for it
    assert "in use" not in after.output and "does not exist" in after.output
    assert not RunDir(out).lock_file().exists()  # the command gave its lock back


@pytest.mark.slow  # starts a second Python process that imports layerprobe
def test_a_holder_that_ends_normally_releases_and_removes_what_it_made(tmp_path):
    out = tmp_path / "a" / "b"
    child = _holder(out)
    assert RunDir(out).lock_file().exists()
    child.communicate("")
    assert child.returncode == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # the lock file and both folders it created are gone


@pytest.mark.slow  # starts a second Python process that imports layerprobe
def test_without_flock_the_holders_name_decides(tmp_path, monkeypatch):
    monkeypatch.setattr(lock, "_flock", lambda fd: False)  # a filesystem that cannot lock
    out = tmp_path / "out"
    out.mkdir()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    holder = {"pid": int(dead.stdout), "host": socket.gethostname(), "started": "x", "boot": lock._boot_id()}
    RunDir(out).lock_file().write_text(json.dumps(holder))
    hold_run_dir(out)  # its process is gone: stale, taken over
    release_run_dirs()
    child = _holder(out)  # a live holder (its flock is real, but ours is not consulted)
    try:
        with pytest.raises(OutputError, match=f"process {child.pid}"):
            hold_run_dir(out)
        rebooted = {**holder, "pid": child.pid, "boot": "another-boot"}
        RunDir(out).lock_file().write_text(json.dumps(rebooted))
        hold_run_dir(out)  # named before the last boot: stale whatever the pid is now
        release_run_dirs()
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()


def test_a_lock_is_held_once_per_process_and_directory(tmp_path):
    first = hold_run_dir(tmp_path / "out")
    assert hold_run_dir(tmp_path / "out") is first
    assert json.loads(RunDir(tmp_path / "out").lock_file().read_text())["pid"] == os.getpid()
    release_run_dirs()
    assert not (tmp_path / "out").exists()


COMMANDS = [
    ["angular", "{model}", "--dataset", "builtin:pydoc", "--tokens", "300", "--seq-len", "64"],
    ["depth", "{model}", "--dataset", "builtin:pydoc"],
    ["demo"],
    ["prune-drop", "{model}", "--task", "lp_arc_like", "--include-path", "{tasks}"],
    ["prune-curve", "{model}", "--task", "corpus"],
    ["merge", "{out}/no-shard"],
    ["stability", "{out}/a.json", "{out}/b.json"],
    ["track", "{out}/run1", "{out}/run2"],
]


@pytest.mark.slow  # starts a second Python process that imports layerprobe
def test_every_command_that_writes_a_run_directory_takes_the_lock(tiny_checkpoints, tmp_path):
    from factories import TASKS_DIR

    out = tmp_path / "out"
    child = _holder(out)
    values = {"model": str(tiny_checkpoints["llama"]), "tasks": str(TASKS_DIR), "out": str(tmp_path)}
    try:
        for command in COMMANDS:
            args = [part.format(**values) for part in command]
            refused = CliRunner().invoke(app, [*args, "--out", str(out)])
            flat = " ".join(refused.output.split())
            assert refused.exit_code == 2 and f"in use by another layerprobe run: process {child.pid}" in flat, (
                command[0],
                flat,
            )
    finally:
        child.kill()
        child.wait()
