"""Where the neutral text comes from and how much of it is measured: `CorpusSpec`."""

from __future__ import annotations

import os
from dataclasses import dataclass

from layerprobe.core.defaults import (
    BUILTIN_CORPUS,
    DEFAULT_DATASET,
    DEFAULT_DATASET_CONFIG,
    LOCAL_BUILDERS,
    MAX_TOKENS,
    TEXTS_CORPUS,
)
from layerprobe.core.errors import LayerprobeError


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

    dataset: str = DEFAULT_DATASET
    dataset_config: str | None = None
    split: str = "validation"
    text_field: str = "text"
    tokens: int = 262_144
    seq_len: int = 1024
    chat_template: bool = False
    texts: tuple[str, ...] | None = None

    def record(self) -> dict[str, object]:
        """What a result's data block says about the chat template: `{"chat_template": true}`, or nothing.

        Left out when off, so results (and resume fingerprints) of runs without the option are unchanged.
        """
        return {"chat_template": True} if self.chat_template else {}

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
