"""The corpus options, declared once: the text (or images) a command streams through the model.

`Corpus` is what `prune-drop` and `prune-curve` take for `--task corpus`; `StreamedCorpus` adds what
`angular` and `depth` measure over (positions, batch size). Split from options.py by idea: the text in,
as opposed to the model, the tasks and the output.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Literal

import typer

from layerprobe.cli.groups import OptionGroup
from layerprobe.core import MAX_TOKENS, POSITIONS, AngularSpec, CorpusSpec, LayerprobeError

if TYPE_CHECKING:  # mypy reads a choice as the str it is; Typer lists and checks the Literal's values
    Positions = str
else:
    Positions = Literal[POSITIONS]


# --- the corpus ---------------------------------------------------------------------------------------


def parse_tokens(value: str) -> int:
    """--tokens: a whole number, also written as 1e6 or 262_144 (capped in CorpusSpec, which says so)."""
    text = value.strip().replace("_", "").replace(",", "")
    try:
        number = float(text) if any(c in text.lower() for c in ".e") else int(text)
    except ValueError:
        number = None
    if number is None or number != number or number in (float("inf"), float("-inf")) or number != int(number):
        raise LayerprobeError(
            f"--tokens {value!r} is not a whole number of tokens.", hint="e.g. --tokens 262144 or 1e6."
        )
    return int(number)


Tokens = Annotated[
    str,
    typer.Option(
        "--tokens",
        metavar="INTEGER",
        help=f"Positions to stream through the model (exact; 1e6 spelling accepted; at most {MAX_TOKENS:,}).",
    ),
]
Dataset = Annotated[
    str,
    typer.Option(
        "--dataset",
        help="Hub dataset id, a local .txt/.jsonl/.parquet file, or builtin:pydoc (offline English text).",
    ),
]
DatasetConfig = Annotated[
    str | None,
    typer.Option("--dataset-config", help="Hub dataset config (default: en for allenai/c4, none otherwise)."),
]
Split = Annotated[str, typer.Option("--split", help="Hub dataset split.")]
TextField = Annotated[str, typer.Option("--text-field", help="Column/field that holds the text.")]
SeqLen = Annotated[int, typer.Option("--seq-len", help="Window length in tokens (capped by the model's context).")]
ChatTemplate = Annotated[
    bool,
    typer.Option(
        "--chat-template",
        help="Wrap each document as a user turn of the tokenizer's chat template (calibrate a chat model on "
        "what it sees).",
    ),
]


@dataclass(frozen=True)
class Corpus(OptionGroup):
    """The neutral text of `--task corpus` and of the angular measurement (`prune-drop`, `prune-curve`)."""

    PANEL = "Corpus"

    tokens: Tokens = str(CorpusSpec.tokens)
    dataset: Dataset = CorpusSpec.dataset
    dataset_config: DatasetConfig = None
    split: Split = CorpusSpec.split
    text_field: TextField = CorpusSpec.text_field
    seq_len: SeqLen = CorpusSpec.seq_len
    chat_template: ChatTemplate = CorpusSpec.chat_template

    def spec(self) -> CorpusSpec:
        return CorpusSpec(
            self.dataset,
            self.dataset_config,
            self.split,
            self.text_field,
            parse_tokens(self.tokens),
            self.seq_len,
            self.chat_template,
        )


@dataclass(frozen=True)
class StreamedCorpus(OptionGroup):
    """The corpus streamed through the model in windows, and which positions count (`angular`, `depth`)."""

    PANEL = "Corpus"

    tokens: Tokens = str(CorpusSpec.tokens)
    positions: Annotated[
        Positions,
        typer.Option(
            "--positions",
            help="all: mean over every measured position; last: the last text token of each window (Gromov et al.).",
        ),
    ] = AngularSpec.positions
    dataset: Dataset = CorpusSpec.dataset
    dataset_config: DatasetConfig = None
    split: Split = CorpusSpec.split
    text_field: TextField = CorpusSpec.text_field
    seq_len: SeqLen = CorpusSpec.seq_len
    chat_template: ChatTemplate = CorpusSpec.chat_template
    batch_size: Annotated[int, typer.Option("--batch-size", "--batch_size", help="Windows per forward pass.")] = (
        AngularSpec.batch_size
    )

    def spec(self) -> CorpusSpec:
        corpus = Corpus(
            tokens=self.tokens,
            dataset=self.dataset,
            dataset_config=self.dataset_config,
            split=self.split,
            text_field=self.text_field,
            seq_len=self.seq_len,
            chat_template=self.chat_template,
        )
        return corpus.spec()
