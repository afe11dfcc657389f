"""What one run of a command was asked to do, validated once, frozen afterwards.

The CLI turns options into these objects and the library trusts them; validation lives here so that a
library user gets the same one-line errors as a CLI user.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from layerprobe.core.checks import parse_eval_batch_size
from layerprobe.core.corpus_spec import CorpusSpec
from layerprobe.core.defaults import (
    CORPUS_TASK,
    DEFAULT_CHUNK_BYTES,
    DEFAULT_MULTIPLICITY,
    DEFAULT_ROUND_SIZE,
    DEFAULT_STATE_BYTES,
    ENGINES,
    MULTIPLICITY_METHODS,
    POSITIONS,
    SQUAD_TASK,
    UNITS,
)
from layerprobe.core.errors import LayerprobeError
from layerprobe.core.model_spec import ModelSpec


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
    positions: str = "all"
    batch_size: int = 8
    max_state_bytes: int = DEFAULT_CHUNK_BYTES  # fp32 states gathered on one device at once

    def __post_init__(self) -> None:
        if self.max_state_bytes < 1:
            raise LayerprobeError(f"--max-state-memory must be positive, got {self.max_state_bytes} bytes.")
        if self.positions not in POSITIONS:
            raise LayerprobeError(f"Unknown --positions {self.positions!r}.", hint="Use 'all' or 'last'.")
        if self.batch_size < 1:
            raise LayerprobeError(f"--batch-size must be positive, got {self.batch_size}.")


@dataclass(frozen=True)
class PruneSpec:
    """One `layerprobe prune-drop` run: which tasks, which layers, how they are scored.

    `layers` is the CLI text (`0-3,7`, inclusive, 0-based; None = every block); it is resolved against
    the model's L once the model is loaded.
    """

    model: ModelSpec
    tasks: tuple[str, ...]
    layers: str | None = None
    limit: float | None = None
    num_fewshot: int | None = None
    batch_size: int | str = 8
    seed: int = 1234
    include_path: str | None = None
    squad_data: str | None = None
    trust_task_code: bool = False  # run the Python a local task YAML names (lm-eval's `!function`)
    engine: str = "auto"
    unit: str = "block"  # what a variant removes: a block, or block l's attention / MLP sublayer
    span: int = 1  # with unit "block": blocks [l, l+span) leave together
    prefix_reuse: bool = True  # shared engine: compute a prefix shared by many requests once
    max_state_bytes: int = DEFAULT_STATE_BYTES  # shared engine: recorded block inputs held at once
    log_samples: bool = False  # write <out>/samples/<task>.jsonl (per-document values) at the end
    angular: str | None = None  # angular.json to rank-compare with ΔP (None: <out>/angular.json if there)
    corpus: CorpusSpec = field(default_factory=CorpusSpec)  # the windows `--task corpus` scores on
    precision: float | None = None  # sequential: stop a variant once its anytime 95 % half-width is ≤ this
    round_size: int = DEFAULT_ROUND_SIZE  # sequential: documents per round
    multiplicity: str = DEFAULT_MULTIPLICITY  # how `significant` is adjusted over variants × tasks × metrics
    # A task given as a YAML path is keyed by the task name its YAML defines; (name, path) says where it is.
    task_files: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        self._check_sequential()
        if self.max_state_bytes < 1:
            raise LayerprobeError(f"--max-state-memory must be positive, got {self.max_state_bytes} bytes.")
        if self.multiplicity not in MULTIPLICITY_METHODS:
            raise LayerprobeError(
                f"Unknown --multiplicity {self.multiplicity!r}.", hint=f"Use one of {', '.join(MULTIPLICITY_METHODS)}."
            )
        check_ablation(self.unit, self.span)
        if not self.tasks:
            raise LayerprobeError("No --task given.", hint="e.g. --task mmlu, --task arc_easy or --task squad.")
        if len(set(self.tasks)) != len(self.tasks):
            raise LayerprobeError(f"A task is named twice in {list(self.tasks)}.")
        if self.engine not in ENGINES:
            raise LayerprobeError(f"Unknown --engine {self.engine!r}.", hint=f"Use one of {', '.join(ENGINES)}.")
        if self.limit is not None and (not math.isfinite(self.limit) or self.limit <= 0):
            raise LayerprobeError(
                f"--limit must be a positive finite number, got {self.limit}.",
                hint="A count of documents per task (e.g. 100) or a fraction below 1 (e.g. 0.1).",
            )
        if self.num_fewshot is not None and self.num_fewshot < 0:
            raise LayerprobeError(f"--num-fewshot must be >= 0, got {self.num_fewshot}.")
        object.__setattr__(self, "batch_size", parse_eval_batch_size(self.batch_size))

    def task_source(self, task: str) -> str:
        """What lm-eval loads for `task`: the YAML path it was given as, else the name itself."""
        return dict(self.task_files).get(task, task)

    def _check_sequential(self) -> None:
        """--precision H and --round-size N: values, and the tasks a sequential run can score."""
        if not isinstance(self.round_size, int) or self.round_size < 1:
            raise LayerprobeError(f"--round-size must be a positive integer, got {self.round_size!r}.")
        if self.precision is None:
            return
        if not math.isfinite(self.precision) or not 0 < self.precision < 1:
            raise LayerprobeError(
                f"--precision must lie in (0, 1), got {self.precision}.",
                hint="The half-width of ΔP's anytime 95 % interval on the 0-1 scale, e.g. --precision 0.05.",
            )
        unbounded = [t for t in self.tasks if t in (SQUAD_TASK, CORPUS_TASK)]
        if unbounded:
            raise LayerprobeError(
                f"--precision scores lm-eval tasks whose per-document metrics lie in [0, 1]; {unbounded[0]} has "
                "no such metric.",
                hint=f"Score {unbounded[0]} in a run without --precision.",
            )


@dataclass(frozen=True)
class DepthSpec:
    """One `layerprobe depth` run: the `angular` options, plus whether to measure gradient norms.

    `grad` adds one forward+backward pass with the model's own loss (next-token, or masked-LM with
    15 % masking seeded by `mask_seed`); it needs a checkpoint that ships its LM head.
    """

    model: ModelSpec
    corpus: CorpusSpec = field(default_factory=CorpusSpec)
    positions: str = "all"
    batch_size: int = 8
    grad: bool = False
    mask_seed: int = 1234

    def __post_init__(self) -> None:
        AngularSpec(self.model, self.corpus, self.positions, self.batch_size)  # the same checks, one home


@dataclass(frozen=True)
class ExportSpec:
    """One `layerprobe prune` run: write a checkpoint without some blocks (or sublayers).

    The removal options are the CLI text (`20-27`, inclusive, 0-based), resolved against the model's L
    once its config is read, or `from_curve` names a prune_curve.json whose `method` chose the set
    removed for `n`. `save` is the new checkpoint's directory; `mergekit_yaml`, if given, where
    the equivalent mergekit passthrough config goes. `max_shard_size` ("5GB", "500MB") caps each
    safetensors shard.
    """

    model: ModelSpec
    save: str
    remove: str | None = None
    remove_attention: str | None = None
    remove_mlp: str | None = None
    overwrite: bool = False
    mergekit_yaml: str | None = None
    max_shard_size: str | None = None  # None: transformers' save_pretrained default
    # --from prune_curve.json --method NAME --n K: remove the set that method chose for n blocks.
    from_curve: str | None = None
    method: str | None = None
    n: int | None = None

    def __post_init__(self) -> None:
        if not self.save:
            raise LayerprobeError("No --save directory given.", hint="Pass --save DIR for the pruned checkpoint.")
        removals = [o for o, v in (("--remove", self.remove), ("--remove-attention", self.remove_attention)) if v]
        removals += ["--remove-mlp"] if self.remove_mlp else []
        if self.from_curve is not None:
            if removals:
                raise LayerprobeError(f"--from and {removals[0]} both say what to remove.", hint="Pass one of them.")
            if self.method is None or self.n is None:
                raise LayerprobeError(
                    "--from needs --method and --n: which method's set, for how many blocks removed.",
                    hint="e.g. --from prune_curve.json --method angular --n 4",
                )
            if self.n < 1:
                raise LayerprobeError(f"--n {self.n}: the number of units removed is at least 1.")
        elif self.method is not None or self.n is not None:
            raise LayerprobeError(
                "--method and --n choose a set from a prune_curve.json.", hint="Pass it with --from FILE."
            )
        elif not removals:
            raise LayerprobeError(
                "Nothing to remove.",
                hint="Pass --remove with 0-based inclusive block ranges, e.g. --remove 20-27, "
                "or --from prune_curve.json --method NAME --n K.",
            )
        if self.max_shard_size is not None and not re.fullmatch(r"\d+(\.\d+)?\s*[KMGT]i?B", self.max_shard_size):
            raise LayerprobeError(
                f"Cannot read --max-shard-size {self.max_shard_size!r}.", hint="Use a size like 5GB or 500MB."
            )
