"""Every file layerprobe writes goes through here (atomically), and every schema it writes is named here.

JSON is the source of truth: plots, `compare` and humans all read the same file. A file is written
to a temporary name beside its target and renamed over it, so a crash never leaves half a result
behind, and a reader sees the old file or the new one. The `schema` member of every JSON file
layerprobe writes (`layerprobe/<kind>@<version>`) is registered in `SCHEMAS` and checked by
`check_schema`: a new version of a file format is one line here.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import secrets
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from layerprobe.core import FULL_DISK_HINT, NO_SPACE, OutputError, ResultError, scrub, without_surrogates
from layerprobe.results.json_types import JSONObject, Record
from layerprobe.results.validate import Node

# The schemas of every JSON file layerprobe writes, by what the file is.
ANGULAR_SCHEMA = "layerprobe/angular@1"
PRUNE_DROP_SCHEMA = "layerprobe/prune-drop@2"  # @2: per variant items, stop, delta_cs95 (--precision)
PRUNE_DROP_SCHEMA_V1 = "layerprobe/prune-drop@1"  # still read everywhere (the new fields read as absent)
DEPTH_SCHEMA = "layerprobe/depth@1"
PRUNE_CURVE_SCHEMA = "layerprobe/prune-curve@2"
PRUNE_CURVE_SCHEMA_V1 = "layerprobe/prune-curve@1"  # no longer written; older files are still read (curve.py)
PARTIAL_SCHEMA = "layerprobe/prune-drop-partial@1"  # prune_drop.partial.json: a run's progress (--resume)
SHARD_SCHEMA = "layerprobe/prune-drop-shard@1"  # prune_drop.shard.json: one job of `--shard i/N`
ANSWERS_SCHEMA = "layerprobe/shared-answers@1"  # the shared engine's answer journal (its first line)
EXPORT_SCHEMA = "layerprobe/export@1"  # layerprobe.json in an exported checkpoint
COMPARE_SCHEMA = "layerprobe/compare@1"  # compare --format json
STABILITY_SCHEMA = "layerprobe/stability@1"  # stability.json: ranking agreement across calibration data
TRACK_SCHEMA = "layerprobe/track@1"  # track.json: the history of several runs (`layerprobe track`)
HEAL_SCHEMA = "layerprobe/heal@1"  # heal.json: a healed cut measured on held-out text (`layerprobe heal`)
GAIN_SCHEMA = "layerprobe/gain@1"  # gain.json: what a smaller checkpoint buys (`layerprobe gain`)
SCHEMAS = (
    ANGULAR_SCHEMA,
    PRUNE_DROP_SCHEMA,
    DEPTH_SCHEMA,
    PRUNE_CURVE_SCHEMA,
    PARTIAL_SCHEMA,
    SHARD_SCHEMA,
    ANSWERS_SCHEMA,
    EXPORT_SCHEMA,
    COMPARE_SCHEMA,
    STABILITY_SCHEMA,
    TRACK_SCHEMA,
    HEAL_SCHEMA,
    GAIN_SCHEMA,
)


def schema_family(schema: str) -> str:
    """A schema without its version: `layerprobe/angular@1` → `layerprobe/angular`."""
    return schema.split("@")[0]


def check_schema(
    root: Node, expected: str, refusal: str | None = None, hint: str | None = None, older: tuple[str, ...] = ()
) -> None:
    """Refuse a document whose `schema` is not `expected` (a registered schema), naming both.

    Args:
        root: The document's top-level node (its `source` names the file in the message).
        expected: One of `SCHEMAS`.
        refusal: The message instead of "<file>: expected a <schema> result, got schema <found>."
        hint: What to do about it.
        older: Earlier versions of the same file that are still read.
    """
    schema = root.obj().get("schema")
    if schema != expected and schema not in older:
        raise ResultError(refusal or f"{root.source}: expected a {expected} result, got schema {schema!r}.", hint=hint)


def atomic_write(path: str | os.PathLike[str], write: Callable[[Path], object]) -> Path:
    """Have `write(tmp)` fill a temporary file beside `path`, then rename it over `path`.

    A reader sees the old file or the new one, never half of one; on any failure the temporary file is
    removed. The temporary file is created by `write` itself (not `mkstemp`, which would make it private
    to its owner), so results and plots get the permissions of any file the user writes and CI artifact
    uploaders or web servers running as another user can read them. Every result file and plot
    layerprobe writes goes through here. The temporary name carries the writer's pid
    (`.angular.json.<pid>-<hex>.tmp`), so the leftovers of a writer killed with SIGKILL, which no
    `finally` can remove, are recognised and removed by the next write into that directory
    (`remove_stale_temp_files`).
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_temp_files(path.parent)
        tmp = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")
        _WRITING.add(tmp.name)
        try:
            write(tmp)
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
            _WRITING.discard(tmp.name)
    except OSError as exc:
        raise _cannot_write(exc, path) from exc
    return path


def _cannot_write(exc: OSError, path: Path) -> OSError | OutputError:
    """One line for a folder that cannot be written or a full disk (the OSError kept as its cause); else `exc`."""
    reason = exc.strerror or str(exc)
    if exc.errno in NO_SPACE:  # the caller may say more (an export names the size it needs): the cause is kept
        return OutputError(
            f"Cannot write {path}: {NO_SPACE[exc.errno]}. Nothing was half-written; files already there are unchanged.",
            reason,
            hint=FULL_DISK_HINT,
        )
    if exc.errno in _CANNOT_WRITE_HERE:
        return OutputError(f"Cannot write {path}: {reason}.", reason, hint="Pick a folder you can write to (--out).")
    return exc


class StagedFile:
    """A file written now under a temporary name beside `path`, put in place by `publish()` (one rename).

    For a file that must appear only once something else succeeded (an export's `--mergekit-yaml`, with
    its checkpoint): a full disk fails the writing, before anything is in place; `discard()` removes it.
    """

    def __init__(self, path: str | os.PathLike[str], text: str) -> None:
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")
            _WRITING.add(self.tmp.name)
            try:
                self.tmp.write_text(scrub(text), encoding="utf-8")
            except BaseException:
                self.discard()
                raise
        except OSError as exc:
            raise _cannot_write(exc, self.path) from exc

    def publish(self) -> Path:
        """Rename the written file over `path`."""
        try:
            os.replace(self.tmp, self.path)
        except OSError as exc:
            raise _cannot_write(exc, self.path) from exc
        finally:
            self.discard()
        return self.path

    def discard(self) -> None:
        """Remove the temporary file if it is still there."""
        self.tmp.unlink(missing_ok=True)
        _WRITING.discard(self.tmp.name)


# Errors of a full disk, a quota or a file-size limit (RLIMIT_FSIZE, a filesystem's largest file).


def full_disk(exc: BaseException) -> OSError | None:
    """The full-disk OSError behind `exc` (itself, or the cause an `OutputError` keeps), None for anything else."""
    for candidate in (exc, exc.__cause__):
        if isinstance(candidate, OSError) and candidate.errno in NO_SPACE:
            return candidate
    return None


# The errors that say "not here" (a read-only, missing or unreachable folder, a file in the way), not "not now".
_CANNOT_WRITE_HERE = {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOENT, errno.ENOTDIR, errno.EEXIST, errno.EISDIR}


# `.angular.json.<pid>-<8 hex>.tmp` (and the pid-less `.angular.json.<8 hex>.tmp` of earlier versions).
_TEMP_NAME = re.compile(r"^\..+\.(?:(\d+)-)?[0-9a-f]{8}\.tmp$")
_PROCESS_STARTED = time.time()
_CLEANED: set[Path] = set()
_WRITING: set[str] = set()  # the temporary names this process is writing right now


def remove_stale_temp_files(directory: Path) -> list[Path]:
    """Remove temporary files of `atomic_write` that no live writer holds; once per directory and process.

    A file counts as stale when its pid is not a running process; when that pid is this process's own
    but the file is not one it is writing (a killed run that had the same pid: containers reuse low pids);
    when the process now holding that pid started after the file was last written (the pid was reused);
    or, for the pid-less names of earlier versions, when it is older than this process. Only names of
    `atomic_write`'s own pattern are touched.
    """
    directory = Path(directory)
    key = directory.resolve()
    if key in _CLEANED:
        return []
    _CLEANED.add(key)
    removed = []
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return []
    for entry in entries:
        match = _TEMP_NAME.match(entry.name)
        if not match or not entry.is_file(follow_symlinks=False):
            continue
        try:
            modified = entry.stat(follow_symlinks=False).st_mtime
            stale = _orphaned(entry.name, int(match[1]), modified) if match[1] else modified < _PROCESS_STARTED
            if stale:
                os.unlink(entry.path)
                removed.append(Path(entry.path))
        except OSError:  # another process removed it first, or it is not ours to remove
            continue
    return removed


def _orphaned(name: str, pid: int, modified: float) -> bool:
    """Whether no live writer holds the temporary file `name` of process `pid`, last written at `modified`."""
    if pid == os.getpid():
        return name not in _WRITING
    if not pid_alive(pid):
        return True
    started = _process_start(pid)
    return started is not None and started > modified + 1.0  # 1 s: the clocks' granularity


def _process_start(pid: int) -> float | None:
    """When process `pid` started (seconds since the epoch), from /proc on Linux; None where unknown."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        boot = next(
            float(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines() if line.startswith("btime")
        )
        return boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def pid_alive(pid: int) -> bool:
    """Whether process `pid` may still be running (ours, or one we may not ask about, counts as running)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, OSError):
        return True  # exists but belongs to someone else, or cannot be asked: leave its file alone
    return True


def write_json(path: str | os.PathLike[str], data: Record) -> Path:
    """Write JSON atomically (see `atomic_write`)."""
    text = json.dumps(data, indent=2, allow_nan=True) + "\n"
    return write_text(path, text)


def write_text(path: str | os.PathLike[str], text: str) -> Path:
    r"""Write a text file atomically (see `atomic_write`): a JUnit report, a YAML recipe. No secret is written.

    A lone surrogate (a name from a JSON `"\udcff"` or a run directory named with a non-UTF-8 byte) is
    written escaped as `\udcff`: UTF-8 cannot hold it, and a name is never worth a failed write.
    """
    text = without_surrogates(scrub(text))  # a token that reached a result by any road (core/redact.py)
    return atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def write_json_lines(path: str | os.PathLike[str], rows: Iterable[Record]) -> Path:
    """Write one JSON object per line, atomically (a finished `samples/<task>.jsonl`); no secret is written."""

    def write(tmp: Path) -> None:
        with open(tmp, "w", encoding="utf-8") as handle:
            for row in rows:
                handle.write(scrub(json.dumps(row, allow_nan=True)) + "\n")

    return atomic_write(path, write)


def checksum(value: object) -> str:
    """The first 16 hex digits of the sha256 of `value`'s canonical JSON (sorted keys, no spaces, NaN allowed).

    Resume state carries one per record, so a record damaged on disk (a flipped byte, a hand edit, a
    truncated copy) is recognised and computed again instead of being trusted.
    """
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=True, ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()[:16]


def read_json_lines(path: str | os.PathLike[str]) -> list[JSONObject]:
    """Read a JSON-lines file layerprobe wrote (`samples/<task>.jsonl`): one object per non-empty line.

    Raises:
        ResultError: the file is missing or unreadable, or a line is not a JSON object (naming the line).
    """
    path = Path(path)
    rows: list[JSONObject] = []
    try:
        with open(path, encoding="utf-8") as handle:
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except (json.JSONDecodeError, RecursionError) as exc:
                    raise ResultError(f"{path}: line {number} is not readable JSON ({exc}).") from None
                if not isinstance(row, dict):
                    raise ResultError(f"{path}: line {number} is not a JSON object.")
                rows.append(row)
    except (OSError, UnicodeDecodeError) as exc:
        raise ResultError(f"{path} is not readable: {exc}") from exc
    return rows


def read_json(path: str | os.PathLike[str]) -> JSONObject:
    """Read a layerprobe JSON file, turning every way it can be unreadable into a `ResultError`."""
    path = Path(path)
    if not path.is_file():
        raise ResultError(
            f"No result file at {path}",
            hint="Pass the path of an angular.json or prune_drop.json that layerprobe wrote.",
        )
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ResultError(f"{path} is not readable JSON: {exc}") from exc
    except RecursionError:  # json recurses once per nesting level: "[[[[…" 100,000 deep
        raise ResultError(f"{path} is not a layerprobe result: its JSON is nested too deeply to read.") from None
    if not isinstance(data, dict) or not str(data.get("schema", "")).startswith("layerprobe/"):
        raise ResultError(f"{path} is not a layerprobe result (no 'schema': 'layerprobe/...').")
    return data
