"""Errors a user can cause and fix.

Everything a user can get wrong (a model that does not exist, too little text, a task lm-eval does not
know) raises a `LayerprobeError`: the CLI prints its one-line message and hint in red and exits with
status 2. Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import errno

# The one hint for "a dataset could not be fetched from the hub" (lm-eval tasks, SQuAD, corpora).
OFFLINE_HINT = (
    "pre-cache the dataset (run once with network, HF_DATASETS_OFFLINE=1 afterwards) or use local files: "
    "--include-path with a local task YAML (dataset_path: json + data_files), or --squad-data FILE"
)


def hub_offline() -> bool:
    """Whether huggingface_hub's offline mode is on (HF_HUB_OFFLINE=1), as the hub library reads it."""
    import os

    return os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in ("1", "ON", "YES", "TRUE")


def offline_model_hint(model: str) -> str:
    """The hint for a model that is neither cached nor reachable: download it once, then run offline."""
    if hub_offline():
        return (
            f"unset HF_HUB_OFFLINE to download it, or download it once with `hf download {model}`; "
            "a local directory works too"
        )
    return (
        f"check the network (or HF_ENDPOINT), or download it once elsewhere with `hf download {model}` "
        "and run with HF_HUB_OFFLINE=1; a local directory works too"
    )


class LayerprobeError(Exception):
    """A mistake in the user's input, explained in one line, with a hint on how to fix it."""

    exit_code = 2

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message}\nHint: {self.hint}"


class ModelNotFound(LayerprobeError):
    """The model id or directory does not exist, is gated, or cannot be reached offline."""


class UnsupportedModel(LayerprobeError):
    """The model loaded, but layerprobe cannot work with it (no block stack, wrong kind for a task)."""


class CorpusError(LayerprobeError):
    """The text corpus cannot be read."""


class EmptyCorpus(CorpusError):
    """The corpus has fewer tokens than were asked for."""


class TaskError(LayerprobeError):
    """An evaluation task is unknown, unreachable offline, or does not fit the model."""


class ResultError(LayerprobeError):
    """A result file is missing, unreadable, of the wrong schema, or does not match a resumed run."""


class OutputError(LayerprobeError):
    """A file cannot be written where it was asked for: a read-only or missing folder, a file in the way.

    `reason` is the system's word for it (e.g. "Permission denied"), for callers that name the option.
    """

    def __init__(self, message: str, reason: str, hint: str | None = None) -> None:
        super().__init__(message, hint)
        self.reason = reason


# Errors of a full disk, a quota or a file-size limit (RLIMIT_FSIZE, a filesystem's largest file): "not now".
NO_SPACE = {
    errno.ENOSPC: "no space left on the device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EFBIG: "file too large",
}


FULL_DISK_HINT = "Free some space on that disk (or raise the quota), or write to another disk (--out)."


def no_space_left(exc: BaseException) -> OutputError | None:
    """A full disk, a quota or a file-size limit met while writing, as one line; None for any other error.

    Every file is written atomically (results/io.py), so what the user had before is still there: the
    line says so. The export explains its own (how much it needed, export/place.py); every other command
    ends here (cli/app.py), so `report`, `track` or `stability` on a full disk print one line, exit 2.
    """
    code = getattr(exc, "errno", None)
    if code not in NO_SPACE:
        return None
    path = getattr(exc, "filename", None)
    where = f"Cannot write {path}" if path else "Cannot write the results"
    return OutputError(
        f"{where}: {NO_SPACE[code]}. Nothing was half-written; files already there are unchanged.",
        NO_SPACE[code],
        hint=FULL_DISK_HINT,
    )
