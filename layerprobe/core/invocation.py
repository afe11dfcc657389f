"""The command line that produced a result: recorded in its `run` block so `layerprobe rerun` can repeat it.

The CLI sets it once per command, from the values the command actually ran with (a `--config` file's
values and the defaults resolved, secrets redacted), never from `sys.argv` as typed: a rerun must not
depend on a YAML file that may have changed since. With it go the content digests of the local files
and folders the command read (task YAMLs, a corpus file, an angular.json…; the model's weights have
their own fingerprint), so a rerun can refuse when one of them changed. A library call made outside the
CLI records none.
"""

from __future__ import annotations

import hashlib
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path

WHOLE_FILE_BYTES = 64 * 2**20  # larger files are digested by size, head and tail (a corpus of gigabytes)
EDGE_BYTES = 2**20


@dataclass(frozen=True)
class Invocation:
    """`layerprobe ARGS…` as it would re-run this command, the folder it ran in, and its inputs' digests."""

    argv: tuple[str, ...]
    cwd: str
    inputs: dict[str, str] = field(default_factory=dict)  # path as typed → "sha256:…" of its content


_CURRENT: ContextVar[Invocation | None] = ContextVar("layerprobe_invocation", default=None)


def set_invocation(invocation: Invocation | None) -> None:
    """Record the running command (the CLI calls this before the command's work starts)."""
    _CURRENT.set(invocation)


def current_invocation() -> Invocation | None:
    """The running command, or None for a library call made outside the CLI."""
    return _CURRENT.get()


def content_digest(path: Path) -> str:
    """`sha256:<hex>` of a file's bytes, or of a folder's files (relative names and bytes, in name order).

    A file over 64 MiB is digested by its size and its first and last MiB: a changed corpus of gigabytes
    is still caught when it grows, shrinks or changes at either end, without reading it all.
    """
    digest = hashlib.sha256()
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    for file in files:
        digest.update(str(file.relative_to(path) if path.is_dir() else file.name).encode() + b"\0")
        size = file.stat().st_size
        with file.open("rb") as handle:
            if size <= WHOLE_FILE_BYTES:
                for chunk in iter(lambda: handle.read(2**20), b""):
                    digest.update(chunk)
            else:
                digest.update(f"size {size}\n".encode() + handle.read(EDGE_BYTES))
                handle.seek(size - EDGE_BYTES)
                digest.update(handle.read(EDGE_BYTES))
    return "sha256:" + digest.hexdigest()


def input_digests(words: list[str], cwd: str) -> dict[str, str]:
    """The digest of every word that names an existing local file or folder (relative to `cwd`)."""
    found: dict[str, str] = {}
    for word in words:
        path = Path(cwd, word)
        if word in found or not word or word.startswith("-"):
            continue
        try:
            if path.exists():
                found[word] = content_digest(path)
        except OSError:
            continue  # unreadable: nothing to compare later, and no reason to stop the run
    return found
