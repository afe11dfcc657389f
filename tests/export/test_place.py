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
# (renames and removals counted in order), or after removing one file of the old checkpoint (k = "half").
CHILD = textwrap.dedent(
    """
    import os, shutil, signal, sys
    from pathlib import Path
    from layerprobe.export import place
    from layerprobe.results import ExportPlaces

    destination, step, files = Path(sys.argv[1]), sys.argv[2], eval(sys.argv[3])
    staging = ExportPlaces(destination).staging(os.getpid())
    for name, text in files.items():
        (staging / name).parent.mkdir(parents=True, exist_ok=True)
        (staging / name).write_text(text)
    place.sync_tree(staging)
    calls = 0
    real_replace, real_rmtree = os.replace, shutil.rmtree

    def kill_at(real):
        def operation(*args, **kwargs):
            global calls
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


def _replace_killed_at(step: str, destination: Path) -> int:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", CHILD, str(destination), step, repr(NEW)], env=env, timeout=120)
    return done.returncode


# step: operation killed before (1: DIR -> backup, 2: staging -> DIR, 3: backup -> trash, 4: removing the trash);
# then the checkpoint the user has after the next run's recovery, and whether that run says it restored one.
CASES = [("0", OLD, False), ("1", OLD, False), ("2", OLD, True), ("3", NEW, False), ("4", NEW, False)]
CASES += [("half", NEW, False), ("never", NEW, False)]


@pytest.mark.parametrize(("step", "expected", "restored"), CASES)
def test_a_kill_at_any_step_leaves_one_complete_checkpoint(tmp_path, step, expected, restored):
    destination = tmp_path / "pruned"
    _write(destination, OLD)
    code = _replace_killed_at(step, destination)
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
