"""What one `layerprobe heal` run was asked to do, validated once (one-line errors before any weight loads)."""

from __future__ import annotations

from dataclasses import dataclass, field

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


@dataclass(frozen=True)
class HealSpec:
    """One `layerprobe heal` run: which blocks go, how the cut is healed, and on which text.

    `remove` is the CLI text (`20-27`, 0-based inclusive) or, with `from_curve`/`curve_method`/`n`, the set
    a prune-curve chose. The calibration windows are the first `corpus.tokens` positions of the corpus; the
    held-out windows the next `held_out_tokens` (disjoint by construction: later positions of one stream).
    """

    model: ModelSpec
    corpus: CorpusSpec = field(default_factory=CorpusSpec)
    remove: str | None = None
    from_curve: str | None = None
    curve_method: str | None = None
    n: int | None = None
    method: str = "linear"
    ridge: float = 0.0
    held_out_tokens: int = DEFAULT_HELD_OUT_TOKENS
    batch_size: int = 8
    seed: int = DEFAULT_SEED
    save: str | None = None
    overwrite: bool = False
    # LoRA (method lora or linear+lora)
    loss: str = "kl"
    rank: int = DEFAULT_LORA_RANK
    targets: str = DEFAULT_LORA_TARGETS
    steps: int = DEFAULT_LORA_STEPS
    lr: float = DEFAULT_LORA_LR
    checkpoint_every: int = DEFAULT_CHECKPOINT_EVERY
    resume: bool = False
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
