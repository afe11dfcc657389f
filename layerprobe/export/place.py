"""Putting a finished checkpoint in place so that one complete checkpoint is always there, and recovery after a kill.

`prune --save DIR` over an existing DIR, in four steps (names from `results.ExportPlaces`):

1. the new checkpoint is written into `DIR.layerprobe-tmp-<pid>` and every file and folder is fsynced;
2. the existing DIR is renamed to `DIR.layerprobe-old`;
3. the new checkpoint is renamed to DIR (and the parent folder fsynced);
4. `DIR.layerprobe-old` is renamed to `DIR.layerprobe-trash-<pid>` and removed.

At every instant DIR or `DIR.layerprobe-old` is a complete checkpoint: a renamed directory is whole, and
the old one is removed only under another name. A run killed between steps 2 and 3 leaves DIR missing;
the next run into DIR (`recover`) renames `DIR.layerprobe-old` back first and says so. Staging and trash
folders of processes that no longer run are removed by the next run, and so is a backup beside a DIR that
an export completed; a folder whose name is not exactly one of these is never touched.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
from pathlib import Path

from layerprobe.core import NO_SPACE, LayerprobeError
from layerprobe.results import ExportPlaces as Places
from layerprobe.results import RunDir, pid_alive

# safetensors reports an I/O error as text: "... I/O error: File too large (os error 27)".
_OS_ERROR_IN_TEXT = re.compile(r"\(os error (\d+)\)")


def recover(destination: Path) -> list[str]:
    """Restore or clean what an interrupted export into `destination` left; one note per thing done.

    A backup with no destination is renamed back (it is complete); a backup beside a destination that
    an export completed (it holds layerprobe.json) is removed; staging and trash folders of processes
    that no longer run are removed. Anything else is left alone, with a note when it needs a decision.
    """
    places = Places(destination)
    notes = []
    backup = places.backup
    if os.path.lexists(backup):  # a folder, or the link a --save that was a link left
        if not os.path.lexists(destination):
            os.replace(backup, destination)
            sync_directory(destination.parent)
            notes.append(
                f"restored {destination} from {backup.name}: an earlier export was interrupted while replacing it"
            )
        elif RunDir(destination).export_record.is_file():
            trash = places.trash(os.getpid())
            os.replace(backup, trash)
            remove(trash)
            notes.append(f"removed {backup}, the checkpoint an earlier export had replaced with {destination}")
        else:
            notes.append(
                f"left {backup} alone: it is the checkpoint an interrupted export was replacing, and {destination} "
                "exists too; remove whichever you do not need"
            )
    for path, pid in places.leftovers():
        if pid == os.getpid() or pid_alive(pid):
            continue
        shutil.rmtree(path, ignore_errors=True)
        notes.append(f"removed {path}, left by an export that was killed (process {pid})")
    return notes


def sync_tree(directory: Path) -> None:
    """Flush every file and folder under `directory` (and itself), so a rename publishes data that is on disk."""
    for root, _dirs, names in os.walk(directory):
        for name in names:
            path = os.path.join(root, name)
            if not os.path.islink(path):
                _fsync(path)
        sync_directory(Path(root))


def sync_directory(directory: Path) -> None:
    """Flush a folder's entries (its renames); a platform that cannot open a folder skips it."""
    if os.name != "nt":
        _fsync(directory)


def _fsync(path: str | Path) -> None:
    """Flush one file's data, or one folder's entries, to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_directory(staging: Path, destination: Path) -> None:
    """Rename the finished `staging` onto `destination`, moving an existing one aside first (steps 2-4)."""
    places = Places(destination)
    backup = None
    if os.path.lexists(destination):
        backup = places.backup
        os.replace(destination, backup)
    try:
        os.replace(staging, destination)
    except BaseException:
        if backup is not None:  # an error or Ctrl-C between the renames: put the old checkpoint back
            os.replace(backup, destination)
        raise
    sync_directory(destination.parent)
    if backup is not None:
        trash = places.trash(os.getpid())
        os.replace(backup, trash)
        remove(trash)


def remove(path: Path) -> None:
    """Remove a folder of ours, or the link that stood for one (a --save link is replaced, never its target)."""
    if path.is_symlink():
        path.unlink()
    else:
        shutil.rmtree(path, ignore_errors=True)


def no_space(
    exc: BaseException, fallback: Path, needed: int, free: int | None, outcome: str = "Nothing was written."
) -> LayerprobeError | None:
    """One line for a full disk, a quota or a file-size limit met while writing; None for any other error.

    `needed` is the estimated size of what was being written in bytes, `free` the free bytes before the
    export, `outcome` what the user has after it.
    """
    code = getattr(exc, "errno", None)
    if code is None and (match := _OS_ERROR_IN_TEXT.search(str(exc))):
        code = int(match[1])
    if code not in NO_SPACE:
        return None
    path = getattr(exc, "filename", None) or fallback
    available = f", {human_bytes(free)} were free there before the export" if free is not None else ""
    hint = "Free some space, or pass --save on a disk with room."
    if code == errno.EFBIG:
        hint = "A file-size limit (ulimit -f, or the filesystem's) stops it: pass a smaller --max-shard-size."
    return LayerprobeError(
        f"Cannot write {path}: {NO_SPACE[code]}; it needs about {human_bytes(needed)}{available}. {outcome}",
        hint=hint,
    )


def human_bytes(size: int) -> str:
    """1234567 → '1.2 MB' (decimal units, like --max-shard-size)."""
    value = float(size)
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if value < 1000 or unit == "TB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{value:.1f} TB"
