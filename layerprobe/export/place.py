"""Putting a finished checkpoint in place so that one complete checkpoint is always there, and recovery after a kill.

`prune --save DIR` over an existing DIR (names from `results.ExportPlaces`):

1. the new checkpoint is written into `DIR.layerprobe-tmp-<pid>` and every file and folder is fsynced;
2. on Linux, one `renameat2(RENAME_EXCHANGE)` swaps the two names: DIR is the new checkpoint and the
   staging name holds the old one, in one step no reader and no signal can see half of;
3. the old checkpoint is renamed to `DIR.layerprobe-trash-<pid>` and removed.

Where the exchange does not exist (another OS, a filesystem without it), step 2 is two renames, DIR to
`DIR.layerprobe-old` and the new checkpoint to DIR, with every catchable signal (Ctrl-C, SIGTERM, SIGHUP,
SIGQUIT) held back until both are done: an interrupt then lands after the swap, never between. Only
SIGKILL (or a power cut) at that instant leaves DIR missing with `DIR.layerprobe-old` whole beside it;
the next run into DIR (`recover`) renames it back first and says so. Staging and trash folders of
processes that no longer run are removed by the next run, and so is a backup beside a DIR that an
export completed; a folder whose name is not exactly one of these is never touched.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import re
import shutil
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from layerprobe.core import NO_SPACE, LayerprobeError
from layerprobe.results import ExportPlaces as Places
from layerprobe.results import RunDir, full_disk, pid_alive

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
    """Put the finished `staging` at `destination`, swapping out an existing one (module docstring, steps 2-3)."""
    places = Places(destination)
    if not os.path.lexists(destination):
        os.replace(staging, destination)
        sync_directory(destination.parent)
        return
    trash = places.trash(os.getpid())
    try:
        if exchange(staging, destination):  # one step: `staging` now holds the old checkpoint
            sync_directory(destination.parent)
            os.replace(staging, trash)
            return
        backup = places.backup
        with signals_held():  # an interrupt arrives after the swap, never between the renames
            os.replace(destination, backup)
            try:
                os.replace(staging, destination)
            except BaseException:
                os.replace(backup, destination)  # an error between the renames: put the old checkpoint back
                raise
            sync_directory(destination.parent)
            os.replace(backup, trash)
    finally:  # also when the held Ctrl-C arrives at the end of the swap
        if os.path.lexists(trash):
            remove(trash)


# renameat2's flag that swaps two names atomically (linux/fs.h), and the "current directory" descriptor.
RENAME_EXCHANGE = 2
_AT_FDCWD = -100
# Errors that say "this kernel, C library or filesystem cannot exchange": the two-rename swap is used instead.
_NO_EXCHANGE = {errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP}


def exchange(a: Path, b: Path) -> bool:
    """Swap the names `a` and `b` in one atomic step (Linux renameat2); False where that is not available."""
    renameat2 = _renameat2()
    if renameat2 is None:
        return False
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in _NO_EXCHANGE:
        return False
    raise OSError(code, os.strerror(code), str(a), None, str(b))


def exchange_available() -> bool:
    """Whether this system has renameat2 at all (a filesystem may still refuse the exchange)."""
    return _renameat2() is not None


def _renameat2() -> Callable[..., int] | None:
    """The C library's renameat2 (glibc 2.28 and later), None on other systems."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        function = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    function.restype = ctypes.c_int
    return function


# The signals a process can catch that end it by default: held back while DIR is between two names.
_HELD = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT") if hasattr(signal, name))


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Hold back Ctrl-C and the other catchable ending signals until the block is done (where the OS can).

    Two holds, because either alone leaks: the signal mask covers only the calling thread, and a Ctrl-C
    (sent to the process) is delivered to any thread that does not block it — torch and tqdm start some —
    whose Python handler would then raise KeyboardInterrupt here, between the renames. So in the main
    thread the Python-level handlers of those signals are also swapped for one that only notes the signal;
    after the block the real handlers are back and each noted signal is raised again, once.
    """
    noted: list[int] = []
    swapped: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for number in _HELD:
            handler = signal.getsignal(number)
            if handler not in (signal.SIG_IGN, None):  # an ignored signal stays ignored
                swapped[number] = handler
                signal.signal(number, lambda received, _frame: noted.append(received))
    blocked = hasattr(signal, "pthread_sigmask")
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, _HELD) if blocked else set()
    try:
        yield
    finally:
        if blocked:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)  # a pending signal arrives now: noted
        for number, handler in swapped.items():
            signal.signal(number, handler)
        for number in dict.fromkeys(noted):
            signal.raise_signal(number)


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
    cause = full_disk(exc)  # an OSError, or the one a results write kept as the cause of its one line
    code = cause.errno if cause is not None else getattr(exc, "errno", None)
    if code is None and (match := _OS_ERROR_IN_TEXT.search(str(exc))):
        code = int(match[1])
    if code not in NO_SPACE:
        return None
    path = getattr(cause, "filename", None) or getattr(exc, "filename", None) or fallback
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
