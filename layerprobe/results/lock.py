"""One run at a time per run directory: a lock on `--out`, held while a command writes there.

Two runs into one `--out` would overwrite each other's progress and results (one finishes, the other's
work is lost and it ends on a progress file that no longer matches). Every command that writes a run
directory takes `RunDir.lock_file` first: `fcntl.flock` on that file, which the kernel releases when the
holder exits in any way, SIGKILL and power loss included, so a lock left by a killed run is never in the
way. The file names its holder (process, host, start time, boot), so the second run refuses with one line
saying who. Where the filesystem has no `flock` (some network mounts), the holder's name alone decides:
a holder on this host whose process is gone, or that ran before the last boot, is stale and taken over.

A lock is taken once per directory and process (a command that takes it twice holds it once) and given
back by `release_run_dirs`, which also removes the lock file and the folders the lock had to create, so
a refused run leaves nothing behind.
"""

from __future__ import annotations

import errno
import json
import os
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path

from layerprobe.core import OutputError
from layerprobe.results.io import pid_alive
from layerprobe.results.rundir import RunDir

try:  # POSIX; elsewhere only the holder's name decides
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

# flock errors that mean "this filesystem cannot lock", not "someone holds it".
_NO_FLOCK = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EINVAL, errno.ENOSYS}


@dataclass
class RunDirLock:
    """The lock this process holds on one run directory."""

    directory: Path
    path: Path
    fd: int
    created: list[Path] = field(default_factory=list)  # folders the lock made, deepest first

    def release(self) -> None:
        """Remove the lock file, let go of the lock, and remove the folders it made if they stayed empty."""
        try:
            self.path.unlink(missing_ok=True)  # while still held: nobody waits on a name that is gone
        finally:
            os.close(self.fd)
        for folder in self.created:
            try:
                folder.rmdir()
            except OSError:  # the run wrote into it (or someone else did): kept
                break


_HELD: dict[Path, RunDirLock] = {}


def hold_run_dir(directory: str | os.PathLike[str], suffix: str = "") -> RunDirLock:
    """Lock `directory` for this process (creating it), or refuse with one line naming the run that holds it.

    `suffix` is a process's rank suffix in a multi-process launch: each rank holds its own lock, and two
    launches (or a launch and a single run) into one directory still meet on rank 0's.

    Raises:
        OutputError: another live run holds the directory.
    """
    directory = Path(os.path.abspath(directory))
    key = directory / RunDir(directory).lock_file(suffix).name
    if key in _HELD:
        return _HELD[key]
    created = [p for p in (directory, *directory.parents) if not p.exists()]
    try:
        directory.mkdir(parents=True, exist_ok=True)
        lock = _acquire(directory, RunDir(directory).lock_file(suffix), created)
    except OSError as exc:
        for folder in created:
            try:
                folder.rmdir()
            except OSError:
                break
        reason = exc.strerror or str(exc)
        raise OutputError(
            f"Cannot lock {directory}: {reason}.", reason, hint="Pick a folder you can write to (--out)."
        ) from exc
    _HELD[key] = lock
    return lock


def release_run_dirs() -> None:
    """Give back every run-directory lock this process holds (the end of a command)."""
    while _HELD:
        _, lock = _HELD.popitem()
        lock.release()


def holder_line(path: Path) -> str:
    """Who holds the lock at `path`, in words ("process 123 on host h, started 2026-…"), from its file."""
    holder = _read_holder(path)
    if not holder:
        return "a process that has not said who it is yet"
    return f"process {holder.get('pid')} on host {holder.get('host')}, started {holder.get('started')}"


def _acquire(directory: Path, path: Path, created: list[Path]) -> RunDirLock:
    """Open and lock `path`; the file must still be the one at `path` once locked (a releaser removes it)."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                locked = _flock(fd)
            except BlockingIOError:
                locked, busy = False, True
            else:
                busy = not locked and _live_holder(path)
            if busy:
                raise OutputError(
                    f"--out {directory} is in use by another layerprobe run: {holder_line(path)}.",
                    "in use",
                    hint="Wait for that run to finish, or pass another --out.",
                )
            try:
                same = os.stat(path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
        except BaseException:
            os.close(fd)
            raise
        if not same:  # its holder removed it between our open and our lock: lock the new one
            os.close(fd)
            continue
        holder = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "boot": _boot_id(),
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(holder) + "\n").encode(), 0)
        return RunDirLock(directory, path, fd, created)


def _flock(fd: int) -> bool:
    """Take the kernel's lock on `fd`: True once held, False where the filesystem cannot lock.

    Raises:
        BlockingIOError: another open file holds it.
    """
    if fcntl is None:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise
    except OSError as exc:
        if exc.errno in _NO_FLOCK:
            return False
        raise
    return True


def _live_holder(path: Path) -> bool:
    """Without a kernel lock: whether the holder named in `path` may still be running (only this host can tell)."""
    holder = _read_holder(path)
    if not holder or holder.get("pid") == os.getpid():
        return False
    if holder.get("host") != socket.gethostname():
        return True  # another machine's run: it cannot be asked, so it is trusted to be alive
    if holder.get("boot") and holder.get("boot") != _boot_id():
        return False  # held before this machine last started
    pid = holder.get("pid")
    return isinstance(pid, int) and pid_alive(pid)


def _read_holder(path: Path) -> dict[str, object]:
    """The holder a lock file names ({} when it is empty, unreadable or not ours)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _boot_id() -> str | None:
    """This boot's id (Linux), so a lock named before a reboot is known to be stale; None elsewhere."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None
