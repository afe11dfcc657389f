"""The corpus options: the text (or images) a command streams through the model.

Every one of them is declared on its spec (`CorpusSpec`; `--positions` and the windows' `--batch-size` on
`AngularSpec`, which `DepthSpec` shares): these groups only say which commands take them together.
`Corpus` is what `prune-drop`, `prune-curve` and `heal` take; `angular` and `depth` add `Streaming`.
"""

from __future__ import annotations

from dataclasses import dataclass

from layerprobe.cli.groups import SpecGroup
from layerprobe.core import CORPUS_PANEL, AngularSpec, CorpusSpec


@dataclass(frozen=True)
class Corpus(SpecGroup):
    """The neutral text of `--task corpus`, of the angular measurement, and of heal's calibration."""

    PANEL = CORPUS_PANEL
    SPEC = CorpusSpec
    FIELDS = ("tokens", "dataset", "dataset_config", "split", "text_field", "seq_len", "chat_template")

    def spec(self) -> CorpusSpec:
        """The CorpusSpec these options describe (checked there: one home for the rules)."""
        return CorpusSpec(**self.spec_fields())


@dataclass(frozen=True)
class Streaming(SpecGroup):
    """Which positions count and how many windows go through at once (`angular`, `depth`)."""

    PANEL = CORPUS_PANEL
    SPEC = AngularSpec
    FIELDS = ("positions", "batch_size")
