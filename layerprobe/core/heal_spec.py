"""What one `layerprobe heal` run was asked to do, validated once (one-line errors before any weight loads)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from layerprobe.core.corpus_spec import CorpusSpec
from layerprobe.core.defaults import (
    DEFAULT_CHECKPOINT_EVERY,
    DEFAULT_HELD_OUT_TOKENS,
    DEFAULT_LORA_LR,
    DEFAULT_LORA_RANK,
    DEFAULT_LORA_STEPS,
    DEFAULT_LORA_TARGETS,
    DEFAULT_SEED,
    HEAL_LOSSES,
    HEAL_METHODS,
    MAX_TOKENS,
)
from layerprobe.core.errors import LayerprobeError
from layerprobe.core.model_spec import ModelSpec
from layerprobe.core.option_spec import OptionSpec, setting
from layerprobe.core.run_specs import WINDOW_BATCH

LORA_PANEL = "LoRA (--method lora, linear+lora)"


@dataclass(frozen=True)
class HealSpec:
    """One `layerprobe heal` run: which blocks go, how the cut is healed, and on which text.

    `remove` is the CLI text (`20-27`, 0-based inclusive) or, with `from_curve`/`curve_method`/`n`, the set
    a prune-curve chose. The calibration windows are the first `corpus.tokens` positions of the corpus; the
    held-out windows the next `held_out_tokens` (disjoint by construction: later positions of one stream).
    """

    model: ModelSpec
    corpus: CorpusSpec = field(default_factory=CorpusSpec)
    remove: str | None = setting(
        None, OptionSpec(("--remove",), "Blocks to remove: 0-based inclusive ranges like 20-27,30.")
    )
    from_curve: str | None = setting(
        None,
        OptionSpec(
            ("--from",),
            "A prune_curve.json: remove the set --curve-method chose for --n blocks.",
            cli_type=Path | None,
            parse=str,
        ),
    )
    curve_method: str | None = setting(
        None,
        OptionSpec(
            ("--curve-method",),
            "With --from: the selection method whose set to remove.",
            cli_type=str,
            cli_default="angular",
        ),
    )
    n: int | None = setting(None, OptionSpec(("--n",), "With --from: the number of blocks that set removes."))
    method: str = setting(
        "linear",
        OptionSpec(
            ("--method",),
            "linear: fit one least-squares map per removed span and fold it into the block before the cut "
            "(no training); lora: LoRA adapters trained to match the unpruned model; linear+lora: both.",
        ),
    )
    ridge: float = setting(
        0.0,
        OptionSpec(("--ridge",), "Ridge term λ of the linear fit, relative to the data's scale (0: plain lstsq)."),
    )
    held_out_tokens: int = setting(
        DEFAULT_HELD_OUT_TOKENS,
        OptionSpec(
            ("--held-out-tokens",), "Positions after the calibration windows on which the three models are compared."
        ),
    )
    batch_size: int = setting(8, WINDOW_BATCH)
    seed: int = setting(DEFAULT_SEED, OptionSpec(("--seed",), "Seed of the recovery bootstrap and of LoRA."))
    save: str | None = setting(
        None,
        OptionSpec(
            ("--save",),
            "Directory for the healed checkpoint (staged, then moved into place, like prune).",
            cli_type=Path | None,
            parse=str,
        ),
    )
    overwrite: bool = setting(
        False, OptionSpec(("--overwrite",), "Replace --save if it exists (the old one goes only at the end).")
    )
    # LoRA (method lora or linear+lora)
    loss: str = setting(
        "kl",
        OptionSpec(("--loss",), "LoRA's objective: kl (to the unpruned model's distribution) or nll.", LORA_PANEL),
    )
    rank: int = setting(DEFAULT_LORA_RANK, OptionSpec(("--rank",), "LoRA rank.", LORA_PANEL))
    targets: str = setting(
        DEFAULT_LORA_TARGETS,
        OptionSpec(("--targets",), "LoRA target modules, comma-separated, or all-linear.", LORA_PANEL),
    )
    steps: int = setting(DEFAULT_LORA_STEPS, OptionSpec(("--steps",), "LoRA optimiser steps.", LORA_PANEL))
    lr: float = setting(DEFAULT_LORA_LR, OptionSpec(("--lr",), "LoRA learning rate.", LORA_PANEL))
    checkpoint_every: int = setting(
        DEFAULT_CHECKPOINT_EVERY,
        OptionSpec(("--checkpoint-every",), "LoRA steps between two resumable checkpoints in --out.", LORA_PANEL),
    )
    resume: bool = setting(
        False,
        OptionSpec(("--resume",), "Continue LoRA training from the checkpoint in --out after a kill.", LORA_PANEL),
    )
    # --task: lm-eval tasks scored on the original, pruned and healed model (prune-drop's options)
    tasks: tuple[str, ...] = ()
    limit: float | None = None
    num_fewshot: int | None = None
    include_path: str | None = None
    trust_task_code: bool = False

    def __post_init__(self) -> None:
        if self.method not in HEAL_METHODS:
            raise LayerprobeError(f"Unknown --method {self.method!r}.", hint=f"Use one of {', '.join(HEAL_METHODS)}.")
        if self.remove is None and self.from_curve is None:
            raise LayerprobeError("Nothing to remove.", hint="Pass --remove 20-27, or --from prune_curve.json --n K.")
        if self.remove is not None and self.from_curve is not None:
            raise LayerprobeError("Pass --remove or --from, not both.")
        if self.remove is not None and not self.remove.strip(" ,"):
            raise LayerprobeError(f"--remove {self.remove!r} names no block.", hint="e.g. --remove 20-27.")
        if self.from_curve is not None and self.n is None:
            raise LayerprobeError("--from needs --n: how many units the chosen set removes.")
        if not self.ridge >= 0 or self.ridge == float("inf"):
            raise LayerprobeError(f"--ridge must be a finite number >= 0, got {self.ridge}.")
        if self.held_out_tokens < 2:
            raise LayerprobeError(f"--held-out-tokens must be at least 2, got {self.held_out_tokens}.")
        if self.corpus.tokens + self.held_out_tokens > MAX_TOKENS:
            raise LayerprobeError(
                f"--tokens + --held-out-tokens is {self.corpus.tokens + self.held_out_tokens:,}, more than "
                f"layerprobe streams in one run ({MAX_TOKENS:,}).",
                hint="Calibration needs far fewer positions; a few hundred thousand is plenty.",
            )
        if self.batch_size < 1:
            raise LayerprobeError(f"--batch-size must be positive, got {self.batch_size}.")
        if self.loss not in HEAL_LOSSES:
            raise LayerprobeError(f"Unknown --loss {self.loss!r}.", hint=f"Use one of {', '.join(HEAL_LOSSES)}.")
        if self.rank < 1:
            raise LayerprobeError(f"--rank must be a positive integer, got {self.rank}.", hint="e.g. --rank 8.")
        if self.steps < 1:
            raise LayerprobeError(f"--steps must be a positive integer, got {self.steps}.", hint="e.g. --steps 200.")
        if not self.lr > 0 or self.lr == float("inf"):
            raise LayerprobeError(f"--lr must be a positive number, got {self.lr}.", hint="e.g. --lr 1e-4.")
        if self.checkpoint_every < 1:
            raise LayerprobeError(f"--checkpoint-every must be positive, got {self.checkpoint_every}.")
        if len(set(self.tasks)) != len(self.tasks):
            raise LayerprobeError(f"A task is named twice in {list(self.tasks)}.")
        if self.limit is not None and not self.limit > 0:
            raise LayerprobeError(f"--limit must be positive, got {self.limit}.")
        if not self.targets.strip(" ,"):
            raise LayerprobeError("--targets names no module.", hint=f"e.g. --targets {DEFAULT_LORA_TARGETS}.")

    @property
    def trains(self) -> bool:
        """Whether LoRA adapters are trained (lora or linear+lora)."""
        return "lora" in self.method

    @property
    def folds(self) -> bool:
        """Whether a linear map is fitted and folded (linear or linear+lora)."""
        return "linear" in self.method
