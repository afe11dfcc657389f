"""Option text read into values, and output paths checked, before any work starts.

The command line and the specs share these, so a library caller and a CLI user get the same one-line errors.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

from layerprobe.core.errors import LayerprobeError

_AUTO_BATCH = re.compile(r"^auto(:\d+)?$")
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(b|kb|kib|mb|mib|gb|gib|tb|tib)?\s*$", re.IGNORECASE)
_UNITS = {"b": 1, "kb": 10**3, "kib": 2**10, "mb": 10**6, "mib": 2**20, "gb": 10**9, "gib": 2**30, "tb": 10**12}
_UNITS["tib"] = 2**40


def parse_memory_size(text: str | None, option: str = "--max-state-memory") -> int | None:
    """`512MiB`, `2GiB`, `1.5GB`, `1000000` (bytes) → bytes; None stays None (the library's default)."""
    if text is None:
        return None
    match = _SIZE.match(text)
    if not match:
        raise LayerprobeError(f"Cannot read {option} {text!r}.", hint="Write a size like 512MiB, 2GiB or 1.5GB.")
    size = int(float(match.group(1)) * _UNITS[(match.group(2) or "b").lower()])
    if size < 1:
        raise LayerprobeError(f"{option} must be positive, got {text!r}.")
    return size


def parse_eval_batch_size(value: int | str) -> int | str:
    """prune-drop's --batch-size: a positive integer, `auto`, or lm-eval's `auto:N` (re-detect N times).

    Raises LayerprobeError for anything else, naming the three forms.
    """
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    text = str(value).strip()
    if text.isdigit() and int(text) >= 1:
        return int(text)
    if _AUTO_BATCH.match(text) and text != "auto:0":
        return text
    raise LayerprobeError(
        f"--batch-size must be a positive integer, 'auto' or 'auto:N', got {value!r}.",
        hint="e.g. --batch-size 8, --batch-size auto or --batch-size auto:4 (lm-eval's spelling).",
    )


def parse_layer_ranges(text: str | None, num_layers: int, option: str = "--layers") -> list[int]:
    """Parse `0-3,7` (inclusive ranges, 0-based) into sorted unique block indices within [0, L-1].

    `option` names the command-line option in error messages.
    """
    if text is None or text.strip() in ("", "all"):
        return list(range(num_layers))
    chosen: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        match = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not match:
            raise LayerprobeError(
                f"Cannot read layer range {part!r} in {option} {text!r}.",
                hint="Use 0-based inclusive ranges like 0-3,7.",
            )
        start = int(match.group(1))
        end = int(match.group(2)) if match.group(2) is not None else start
        if end < start:
            raise LayerprobeError(f"Layer range {part!r} runs backwards.", hint=f"Did you mean {end}-{start}?")
        if end >= num_layers:
            raise LayerprobeError(
                f"{option} {text!r} is out of range: the model has {num_layers} blocks.",
                hint=f"Blocks are numbered 0 to {num_layers - 1}.",
            )
        chosen.update(range(start, end + 1))
    return sorted(chosen)


def check_output_dir(directory: str | os.PathLike[str], option: str = "--out") -> Path:
    """Refuse an output directory that cannot be written, before any work: a file, or a read-only parent.

    Nothing is created here (a refused run leaves nothing behind); the nearest existing ancestor must be a
    writable directory, so the run can create the rest when it writes. Writable is tried, not only asked:
    `access()` says yes to root everywhere, also where no file can be made (/proc), so a nameless
    temporary file is opened there and closed again.
    """
    path = os.path.abspath(os.fspath(directory))
    if os.path.exists(path) and not os.path.isdir(path):
        raise LayerprobeError(f"{option} {directory} is a file, not a directory.", hint="Give a directory path.")
    ancestor = path
    while not os.path.exists(ancestor):
        parent = os.path.dirname(ancestor)
        if parent == ancestor:
            break
        ancestor = parent
    if not os.path.isdir(ancestor):
        raise LayerprobeError(
            f"{option} {directory} cannot be created: {ancestor} is an existing file.",
            hint=f"Pass a directory to {option} (it is created if missing).",
        )
    refusal = LayerprobeError(
        f"{option} {directory} is not writable ({ancestor} does not allow writing).",
        hint=f"Pick a directory you can write to with {option.split()[0]}.",
    )
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise refusal
    try:
        with tempfile.TemporaryFile(dir=ancestor):  # O_TMPFILE where there is one: never visible
            pass
    except OSError:
        raise refusal from None
    return Path(directory)


def parse_tokens(value: str | int) -> int:
    """--tokens: a whole number, also written as 1e6 or 262_144 (capped in CorpusSpec, which says so)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    text = str(value).strip().replace("_", "").replace(",", "")
    try:
        number = float(text) if any(c in text.lower() for c in ".e") else int(text)
    except ValueError:
        number = None
    if number is None or number != number or number in (float("inf"), float("-inf")) or number != int(number):
        raise LayerprobeError(
            f"--tokens {value!r} is not a whole number of tokens.", hint="e.g. --tokens 262144 or 1e6."
        )
    return int(number)
