"""Asking the Hugging Face Hub and transformers for a model: their failures as one line, their chatter silenced.

Every way loading can fail because of the user's input (unknown id, gated repo, offline, remote code not
trusted) becomes a one-line `ModelNotFound` with a hint on what to do. An unreachable Hub logs a dozen retry
lines, and transformers its load reports and tqdm bars; those are silenced while layerprobe shows its own
progress.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

from layerprobe.core import LayerprobeError, ModelNotFound, ModelSpec, UnsupportedModel, hub_offline, offline_model_hint


def translate_load_error(exc: Exception, spec: ModelSpec) -> LayerprobeError:
    """Map the many ways hub/transformers loading fails onto one clear message."""
    text = f"{type(exc).__name__}: {exc}"
    chain = [exc, exc.__cause__, exc.__context__]
    names = {type(e).__name__ for e in chain if e is not None}
    where = f"{spec.model!r}" + (f" at revision {spec.revision!r}" if spec.revision else "")
    if "GatedRepoError" in names or "gated repo" in text.lower():
        return ModelNotFound(
            f"{where} is a gated model and this machine has no access to it.",
            hint="Accept its licence on huggingface.co and run `hf auth login` (or set HF_TOKEN).",
        )
    if "trust_remote_code" in text:
        return ModelNotFound(
            f"{where} needs its own modelling code to load.",
            hint="Re-run with --trust-remote-code if you trust that repository.",
        )
    if "RevisionNotFoundError" in names or "is not a valid git identifier" in text:
        return ModelNotFound(
            f"Revision {spec.revision!r} does not exist for {spec.model!r}.",
            hint="Pass a branch, tag or commit hash that exists.",
        )
    if (
        any(n in names for n in ("LocalEntryNotFoundError", "OfflineModeIsEnabled"))
        or "couldn't connect" in text.lower()
        or "offline" in text.lower()
    ):
        return _unreachable(where, spec.model)
    if "Unrecognized" in text or "does not recognize this architecture" in text:
        return UnsupportedModel(
            f"transformers cannot build {where}: {str(exc).splitlines()[0]}",
            hint="Upgrade transformers, or pass --trust-remote-code for custom models.",
        )
    return ModelNotFound(
        f"Cannot load {where}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}",
        hint="Check the hub id (org/name) or the local directory path.",
    )


def _unreachable(where: str, model: str) -> ModelNotFound:
    """One line for "not cached and the Hub cannot be reached", saying whether offline mode is on."""
    if hub_offline():
        return ModelNotFound(
            f"{where} is not in the local Hugging Face cache and the Hub cannot be reached: offline mode is set "
            "(HF_HUB_OFFLINE=1).",
            hint=offline_model_hint(model),
        )
    return ModelNotFound(
        f"{where} is not in the local Hugging Face cache and the Hugging Face Hub cannot be reached.",
        hint=offline_model_hint(model),
    )


@contextlib.contextmanager
def quiet_hub_logs() -> Iterator[None]:
    """Silence huggingface_hub's and datasets' warnings while the Hub is asked for files.

    An unreachable Hub logs a dozen retry lines that would interleave with the progress bar; the failure
    itself becomes one LayerprobeError.
    """
    loggers = [logging.getLogger(name) for name in ("huggingface_hub", "datasets")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


@contextlib.contextmanager
def quiet_transformers() -> Iterator[None]:
    """Silence transformers' load reports and tqdm bars; layerprobe shows its own progress."""
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        with quiet_hub_logs():
            yield
    finally:
        hf_logging.set_verbosity(level)
        if bars:
            hf_logging.enable_progress_bar()
