"""What one run of a command was asked to do, validated once, frozen afterwards.

The CLI turns options into these objects and the library trusts them; validation lives here so that a
library user gets the same one-line errors as a CLI user.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from layerprobe.core.checks import parse_memory_size
from layerprobe.core.corpus_spec import CorpusSpec
from layerprobe.core.defaults import (
    DEFAULT_CHUNK_BYTES,
    POSITIONS,
    UNITS,
)
from layerprobe.core.errors import LayerprobeError
from layerprobe.core.model_spec import ModelSpec
from layerprobe.core.option_spec import (
    CORPUS_PANEL,
    SCALE_PANEL,
    OptionSpec,
    setting,
)

# --max-state-memory: one declaration for prune-drop and angular, whose defaults differ (the help says both).
MAX_STATE_MEMORY = OptionSpec(
    ("--max-state-memory",),
    "Bound on hidden states held at once, e.g. 512MiB or 4GiB. prune-drop: block inputs the shared "
    "engine records per chunk (default 2GiB); angular: fp32 states gathered on one device (default 256MiB).",
    SCALE_PANEL,
    cli_type=str | None,
    cli_default=None,
    parse=parse_memory_size,
    param="max_state_memory",
    fingerprint=True,
    recorded=True,
    minimum=1,
)

# --positions and angular's --batch-size: declared once for angular and depth, which stream the same windows.
POSITIONS_OPTION = OptionSpec(
    ("--positions",),
    "all: mean over every measured position; last: the last text token of each window (Gromov et al.).",
    CORPUS_PANEL,
    cli_type=Literal[POSITIONS],
)
WINDOW_BATCH = OptionSpec(("--batch-size", "--batch_size"), "Windows per forward pass.", CORPUS_PANEL)


def check_ablation(unit: str, span: int) -> None:
    """Validate --unit / --span (one home for PruneSpec and ablation.Ablation)."""
    if unit not in UNITS:
        raise LayerprobeError(f"Unknown --unit {unit!r}.", hint=f"Use one of {', '.join(UNITS)}.")
    if not isinstance(span, int) or span < 1:
        raise LayerprobeError(f"--span must be a positive integer, got {span!r}.")
    if span > 1 and unit != "block":
        raise LayerprobeError(
            f"--span {span} removes runs of whole blocks; it cannot be combined with --unit {unit}.",
            hint="Use --unit block (the default) with --span, or --span 1 with a sublayer unit.",
        )


@dataclass(frozen=True)
class AngularSpec:
    """One `layerprobe angular` run."""

    model: ModelSpec
    corpus: CorpusSpec = field(default_factory=CorpusSpec)
    positions: str = setting("all", POSITIONS_OPTION)
    batch_size: int = setting(8, WINDOW_BATCH)
    max_state_bytes: int = setting(DEFAULT_CHUNK_BYTES, MAX_STATE_MEMORY)  # fp32 states gathered on one device

    def __post_init__(self) -> None:
        if self.max_state_bytes < 1:
            raise LayerprobeError(f"--max-state-memory must be positive, got {self.max_state_bytes} bytes.")
        if self.positions not in POSITIONS:
            raise LayerprobeError(f"Unknown --positions {self.positions!r}.", hint="Use 'all' or 'last'.")
        if self.batch_size < 1:
            raise LayerprobeError(f"--batch-size must be positive, got {self.batch_size}.")


@dataclass(frozen=True)
class DepthSpec:
    """One `layerprobe depth` run: the `angular` options, plus whether to measure gradient norms.

    `grad` adds one forward+backward pass with the model's own loss (next-token, or masked-LM with
    15 % masking seeded by `mask_seed`); it needs a checkpoint that ships its LM head.
    """

    model: ModelSpec
    corpus: CorpusSpec = field(default_factory=CorpusSpec)
    positions: str = setting("all", POSITIONS_OPTION)
    batch_size: int = setting(8, WINDOW_BATCH)
    grad: bool = setting(
        False,
        OptionSpec(
            ("--grad",),
            "Also the gradient norm of each block and sublayer for the model's own loss (next-token, or "
            "masked-LM for encoders); one more forward+backward pass.",
        ),
    )
    mask_seed: int = setting(1234, OptionSpec(("--mask-seed",), "Seed of the 15 % masked-LM masking (--grad)."))

    def __post_init__(self) -> None:
        AngularSpec(self.model, self.corpus, self.positions, self.batch_size)  # the same checks, one home
