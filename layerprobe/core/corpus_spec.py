"""Where the neutral text comes from and how much of it is measured: `CorpusSpec`."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from layerprobe.core.checks import parse_tokens
from layerprobe.core.defaults import (
    BUILTIN_CORPUS,
    DEFAULT_DATASET,
    DEFAULT_DATASET_CONFIG,
    LOCAL_BUILDERS,
    MAX_TOKENS,
    TEXTS_CORPUS,
)
from layerprobe.core.errors import LayerprobeError
from layerprobe.core.option_spec import CORPUS_PANEL, OMITTED, OptionSpec, recorded_values, setting

# The corpus options are fingerprinted through the record (prune/state.py: the corpus block), never one by one.
RECORD: dict[str, Any] = {"panel": CORPUS_PANEL, "recorded": True}


@dataclass(frozen=True)
class CorpusSpec:
    """Where the neutral text comes from and how much of it is measured.

    `dataset` is a hub dataset id, a local .txt/.jsonl/.parquet file, or `builtin:pydoc` (the
    standard library's pydoc topics: real English text that needs no network). C4 without a config
    reads its English split, for library callers and the CLI alike. With `chat_template`, each document
    is wrapped as one user turn of the tokenizer's chat template before it is tokenized (data/windows.py),
    so a chat model is calibrated on text shaped like what it sees. `texts` (the Python API's list of
    strings) are the documents themselves, in order; the dataset is then recorded as `texts`.
    """

    dataset: str = setting(
        DEFAULT_DATASET,
        OptionSpec(
            ("--dataset",),
            "Hub dataset id, a local .txt/.jsonl/.parquet file, or builtin:pydoc (offline English text).",
            **RECORD,
        ),
    )
    dataset_config: str | None = setting(
        None,
        OptionSpec(
            ("--dataset-config",),
            "Hub dataset config (default: en for allenai/c4, none otherwise).",
            key="config",
            only_when="is_hub",
            otherwise=None,
            **RECORD,
        ),
    )
    split: str = setting(
        "validation", OptionSpec(("--split",), "Hub dataset split.", only_when="is_hub", otherwise=None, **RECORD)
    )
    text_field: str = setting("text", OptionSpec(("--text-field",), "Column/field that holds the text.", **RECORD))
    tokens: int = setting(
        262_144,
        OptionSpec(
            ("--tokens",),
            f"Positions to stream through the model (exact; 1e6 spelling accepted; at most {MAX_TOKENS:,}).",
            cli_type=str,
            cli_default="262144",
            parse=parse_tokens,
            metavar="INTEGER",
            minimum=1,
            **RECORD,
        ),
    )
    seq_len: int = setting(
        1024,
        OptionSpec(("--seq-len",), "Window length in tokens (capped by the model's context).", minimum=1, **RECORD),
    )
    chat_template: bool = setting(
        False,
        OptionSpec(
            ("--chat-template",),
            "Wrap each document as a user turn of the tokenizer's chat template (calibrate a chat model on "
            "what it sees).",
            only_when="chat_template",  # recorded only when on: results of runs without it are unchanged
            **RECORD,
        ),
    )
    texts: tuple[str, ...] | None = None

    def record(self, **measured: Any) -> dict[str, Any]:
        """What a result's data block says about the corpus: the recorded settings, as declared above.

        `measured` replaces a setting by what the run measured (`tokens`, `seq_len` capped by the model's
        context) or, given as `OMITTED`, leaves it out. A hub dataset's config and split are None for a
        local file; the chat template is left out when off, so results of runs without it are unchanged.
        """
        values = recorded_values(self)
        for key, value in measured.items():
            if value is OMITTED:
                values.pop(key, None)
            else:
                values[key] = value
        return values

    def __post_init__(self) -> None:
        if self.texts is not None:
            if not self.texts or not all(isinstance(t, str) for t in self.texts):
                raise LayerprobeError(
                    "A corpus given as texts must be a non-empty list of strings.",
                    hint='e.g. corpus=["First document.", "Second document."]',
                )
            object.__setattr__(self, "dataset", TEXTS_CORPUS)
        if self.dataset == DEFAULT_DATASET and self.dataset_config is None:
            object.__setattr__(self, "dataset_config", DEFAULT_DATASET_CONFIG)
        if self.tokens < 1:
            raise LayerprobeError(f"--tokens must be positive, got {self.tokens}.")
        if self.tokens > MAX_TOKENS:
            raise LayerprobeError(
                f"--tokens {self.tokens:,} is more than layerprobe streams in one run (at most {MAX_TOKENS:,}).",
                hint="Distances settle long before that; 262,144 (the default) is plenty for most models.",
            )
        if self.seq_len < 2:
            raise LayerprobeError(f"--seq-len must be at least 2, got {self.seq_len}.")

    @property
    def is_local(self) -> bool:
        """A file on disk (or a path with a corpus file's suffix, reported missing when opened)."""
        if self.texts is not None:
            return False
        return os.path.exists(self.dataset) or os.path.splitext(self.dataset)[1].lower() in LOCAL_BUILDERS

    @property
    def is_hub(self) -> bool:
        """Read from the Hugging Face hub: neither builtin:pydoc nor a local file."""
        return self.dataset != BUILTIN_CORPUS and self.texts is None and not self.is_local
