"""Replacing `prune --save DIR`: killed (SIGKILL) at any step, one complete checkpoint is there or is restored.

Each case runs the replacement in a fresh Python process that kills itself with SIGKILL just before the
k-th rename or removal (or halfway through removing the old checkpoint), so no `finally` runs, exactly
as when a user's machine kills the export. The test then looks at the directory as the user would, lets
the next run's `recover` look at it, and checks what is there, file by file.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from layerprobe.export import place
from layerprobe.results import ExportPlaces

OLD = {"config.json": "old config", "model.safetensors": "old weights", "sub/extra.txt": "old extra"}
NEW = {"config.json": "new config", "model.safetensors": "new weights", "layerprobe.json": "{}"}

# In the child: write the new checkpoint into its staging folder, then replace; SIGKILL before operation k
# (exchanges, renames and removals counted in order), or after removing one file of the old checkpoint
# (k = "half"). argv[4] "renames" takes the exchange away (another OS, a filesystem without it).
CHILD = textwrap.dedent(
    """
    import os, shutil, signal, sys
    from pathlib import Path
    from layerprobe.export import place
    from layerprobe.results import ExportPlaces

    destination, step, files, mode = Path(sys.argv[1]), sys.argv[2], eval(sys.argv[3]), sys.argv[4]
    staging = ExportPlaces(destination).staging(os.getpid())
    for name, text in files.items():
        (staging / name).parent.mkdir(parents=True, exist_ok=True)
        (staging / name).write_text(text)
    place.sync_tree(staging)
    calls = 0
    real_replace, real_rmtree = os.replace, shutil.rmtree
    real_exchange = place.exchange if mode == "exchange" else (lambda a, b: False)

    def kill_at(real):
        def operation(*args, **kwargs):
            global calls
            if real is real_exchange and mode != "exchange":
                return False
            calls += 1
            if step == str(calls):
                os.kill(os.getpid(), signal.SIGKILL)
            if step == "half" and real is real_rmtree:
                first = next(p for p in Path(args[0]).rglob("*") if p.is_file())
                first.unlink()
                os.kill(os.getpid(), signal.SIGKILL)
            return real(*args, **kwargs)
        return operation

    os.replace, shutil.rmtree = kill_at(real_replace), kill_at(real_rmtree)
    place.exchange = kill_at(real_exchange)
    if step == "0":
        os.kill(os.getpid(), signal.SIGKILL)  # killed while writing: nothing renamed yet
    place.replace_directory(staging, destination)
    """
)


def _write(directory: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (directory / name).parent.mkdir(parents=True, exist_ok=True)
        (directory / name).write_text(text)


def _read(directory: Path) -> dict[str, str]:
    return {p.relative_to(directory).as_posix(): p.read_text() for p in sorted(directory.rglob("*")) if p.is_file()}


def _replace_killed_at(step: str, destination: Path, mode: str = "renames") -> int:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    command = [sys.executable, "-c", CHILD, str(destination), step, repr(NEW), mode]
    return subprocess.run(command, env=env, timeout=120).returncode


# step: operation killed before (1: DIR -> backup, 2: staging -> DIR, 3: backup -> trash, 4: removing the trash);
# then the checkpoint the user has after the next run's recovery, and whether that run says it restored one.
CASES = [("0", OLD, False), ("1", OLD, False), ("2", OLD, True), ("3", NEW, False), ("4", NEW, False)]
CASES += [("half", NEW, False), ("never", NEW, False)]


@pytest.mark.parametrize(("step", "expected", "restored"), CASES)
def test_a_kill_at_any_step_leaves_one_complete_checkpoint(tmp_path, step, expected, restored):
    destination = tmp_path / "pruned"
    _write(destination, OLD)
    code = _replace_killed_at(step, destination, "renames")
    assert code == (0 if step == "never" else -9)
    backup = ExportPlaces(destination).backup
    # At the instant of the kill: the destination is whole (old or new), or it is missing and the backup is whole.
    if destination.exists():
        assert _read(destination) in (OLD, NEW)
    else:
        assert _read(backup) == OLD
    notes = place.recover(destination)
    assert _read(destination) == expected
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pruned"]  # staging, backup and trash all cleaned
    assert any("restored" in note for note in notes) == restored
    if step != "never":
        assert notes, "the next run says what it restored or removed"
    assert place.recover(destination) == []  # nothing left to say the second time


# With the exchange: 1 swaps DIR and staging, 2 renames the old checkpoint (now at staging) to trash, 3 removes it.
EXCHANGE_CASES = [("0", OLD), ("1", OLD), ("2", NEW), ("3", NEW), ("half", NEW), ("never", NEW)]


@pytest.mark.skipif(not place.exchange_available(), reason="no renameat2(RENAME_EXCHANGE) here")
@pytest.mark.parametrize(("step", "expected"), EXCHANGE_CASES)
def test_with_the_exchange_dir_is_never_missing(tmp_path, step, expected):
    destination = tmp_path / "pruned"
    _write(destination, OLD)
    code = _replace_killed_at(step, destination, "exchange")
    assert code == (0 if step == "never" else -9)
    assert _read(destination) == (OLD if step in ("0", "1") else NEW)  # whole at the instant of the kill
    assert not ExportPlaces(destination).backup.exists()
    notes = place.recover(destination)
    assert _read(destination) == expected
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pruned"]
    assert not any("restored" in note for note in notes)


# In the child: the two-rename swap, and a real Ctrl-C (SIGINT) sent right after the first rename, to the
# process (the kernel may hand it to any thread: the helper thread blocks nothing) or to the main thread.
# Python is given its Ctrl-C handler first: a child of a shell's background job inherits SIGINT ignored.
INTERRUPTED_CHILD = textwrap.dedent(
    """
    import os, signal, sys, threading
    from pathlib import Path
    from layerprobe.export import place

    signal.signal(signal.SIGINT, signal.default_int_handler)
    destination, staging, target = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    real = os.replace
    threading.Thread(target=threading.Event().wait, daemon=True).start()

    def replace(source, target_):
        real(source, target_)
        if Path(source) == destination:
            if target == "process":
                os.kill(os.getpid(), signal.SIGINT)
            else:
                signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

    os.replace = replace
    place.exchange = lambda a, b: False
    try:
        place.replace_directory(staging, destination)
    except KeyboardInterrupt:
        sys.exit(130)
    """
)


@pytest.mark.parametrize("target", ["process", "main-thread"])
def test_ctrl_c_between_the_two_renames_leaves_a_whole_checkpoint(tmp_path, target):
    destination, staging = tmp_path / "pruned", tmp_path / "staging"
    _write(destination, OLD)
    _write(staging, NEW)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    command = [sys.executable, "-c", INTERRUPTED_CHILD, str(destination), str(staging), target]
    done = subprocess.run(command, env=env, timeout=120)
    assert done.returncode == 130  # the interrupt is still honoured, once the swap is done
    assert _read(destination) == NEW
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pruned"]


def test_recover_leaves_alone_what_is_not_its_own(tmp_path):
    destination = tmp_path / "pruned"
    _write(destination, OLD)  # a user's own folder (no layerprobe.json), and a backup of ours beside it
    backup = ExportPlaces(destination).backup
    _write(backup, NEW)
    for name in ("pruned.layerprobe-tmp-x", "pruned.layerprobe-tmp-12a", "pruned-copy", "other.layerprobe-tmp-1"):
        (tmp_path / name).mkdir()
    live = ExportPlaces(destination).staging(os.getpid())  # a live process's staging folder
    live.mkdir()
    notes = place.recover(destination)
    assert _read(destination) == OLD and _read(backup) == NEW
    assert len(notes) == 1 and "left" in notes[0] and "remove whichever" in notes[0]
    assert {p.name for p in tmp_path.iterdir()} == {
        "pruned",
        backup.name,
        "pruned.layerprobe-tmp-x",
        "pruned.layerprobe-tmp-12a",
        "pruned-copy",
        "other.layerprobe-tmp-1",
        live.name,
    }


def test_an_error_between_the_renames_puts_the_old_checkpoint_back(tmp_path, monkeypatch):
    destination, staging = tmp_path / "pruned", tmp_path / "staging"
    _write(destination, OLD)
    _write(staging, NEW)
    real = os.replace

    def interrupted(source, target):
        if Path(source) == staging:
            raise KeyboardInterrupt
        real(source, target)

    monkeypatch.setattr(place.os, "replace", interrupted)
    monkeypatch.setattr(place, "exchange", lambda a, b: False)
    with pytest.raises(KeyboardInterrupt):
        place.replace_directory(staging, destination)
    assert _read(destination) == OLD and not ExportPlaces(destination).backup.exists()


@pytest.mark.parametrize(
    ("exc", "says"),
    [
        (OSError(errno.ENOSPC, "No space left on device", "/big/model.safetensors"), "no space left on the device"),
        (OSError(errno.EDQUOT, "Disk quota exceeded"), "disk quota exceeded"),
        (RuntimeError("Error while serializing: I/O error: File too large (os error 27)"), "file too large"),
    ],
)
def test_no_space_names_the_path_and_the_size_needed(tmp_path, exc, says):
    error = place.no_space(exc, tmp_path, needed=2_500_000, free=1_000_000)
    assert error is not None and says in str(error) and "2.5 MB" in str(error) and "1.0 MB were free" in str(error)
    assert (exc.filename if isinstance(exc, OSError) and exc.filename else str(tmp_path)) in str(error)
    assert place.no_space(OSError(errno.EACCES, "Permission denied"), tmp_path, 1, None) is None
    assert place.no_space(ValueError("bad"), tmp_path, 1, None) is None


def test_human_bytes():
    assert [place.human_bytes(n) for n in (999, 1000, 1_234_567, 5 * 10**9)] == ["999 B", "1.0 kB", "1.2 MB", "5.0 GB"]


def test_a_save_given_as_a_link_is_replaced_not_its_target(tmp_path):
    target, destination, staging = tmp_path / "elsewhere", tmp_path / "pruned", tmp_path / "staging"
    _write(target, OLD)
    destination.symlink_to(target, target_is_directory=True)
    _write(staging, NEW)
    place.replace_directory(staging, destination)
    assert not destination.is_symlink() and _read(destination) == NEW and _read(target) == OLD
    assert sorted(p.name for p in tmp_path.iterdir()) == ["elsewhere", "pruned"]
    # killed between the renames with a link as --save: the link waits as the backup and is put back
    backup = ExportPlaces(destination).backup
    shutil.rmtree(destination)
    backup.symlink_to(target, target_is_directory=True)
    (note,) = place.recover(destination)
    assert "restored" in note and destination.is_symlink() and _read(destination) == OLD
