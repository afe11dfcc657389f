"""One `layerprobe prune-drop` run (also the scoring half of prune-curve): every setting declared on its field.

Each field made with `setting(...)` is the one declaration of its option (option_spec.py): the commands'
options, the resume fingerprint, the result's `settings` block and its reader all come from here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from layerprobe.core.checks import parse_eval_batch_size
from layerprobe.core.corpus_spec import CorpusSpec
from layerprobe.core.defaults import (
    CORPUS_TASK,
    DEFAULT_MULTIPLICITY,
    DEFAULT_ROUND_SIZE,
    DEFAULT_STATE_BYTES,
    ENGINES,
    MULTIPLICITY_METHODS,
    SQUAD_TASK,
)
from layerprobe.core.errors import LayerprobeError
from layerprobe.core.model_spec import ModelSpec
from layerprobe.core.option_spec import (
    OUTPUT_PANEL,
    SCALE_PANEL,
    STATISTICS_PANEL,
    TASKS_PANEL,
    OptionSpec,
    setting,
)
from layerprobe.core.run_specs import MAX_STATE_MEMORY, check_ablation


@dataclass(frozen=True)
class PruneSpec:
    """One `layerprobe prune-drop` run: which tasks, which layers, how they are scored.

    `layers` is the CLI text (`0-3,7`, inclusive, 0-based; None = every block); it is resolved against
    the model's L once the model is loaded.
    """

    model: ModelSpec
    tasks: tuple[str, ...]
    layers: str | None = setting(
        None,
        OptionSpec(
            ("--layers",),
            "Blocks to remove, one at a time: 0-based inclusive ranges like 0-3,7 (default: all blocks).",
            # A sequential run replays rounds scored for these variants; a full run records the resolved blocks.
            fingerprint=True,
            only_when="sequential",
            key="sequential_layers",
        ),
    )
    limit: float | None = setting(
        None,
        OptionSpec(
            ("--limit",),
            "Documents per task (a value < 1 is a fraction), for quick runs.",
            TASKS_PANEL,
            fingerprint=True,
            recorded=True,
            minimum=0.0,
        ),
    )
    num_fewshot: int | None = setting(
        None,
        OptionSpec(
            ("--num-fewshot", "--num_fewshot"),
            "Few-shot examples (default: the task's own).",
            TASKS_PANEL,
            fingerprint=True,
            recorded=True,
            minimum=0,
        ),
    )
    batch_size: int | str = setting(
        8,
        OptionSpec(
            ("--batch-size", "--batch_size"),
            "Requests per forward pass, or 'auto' (lm-eval's detection of the largest that fits; 'auto:N' as "
            "in lm-eval).",
            TASKS_PANEL,
            cli_type=str,
            cli_default="8",
            fingerprint=True,
            recorded=True,
        ),
    )
    seed: int = setting(
        1234,
        OptionSpec(
            ("--seed",), "Seed for few-shot sampling and every RNG.", TASKS_PANEL, fingerprint=True, recorded=True
        ),
    )
    include_path: str | None = setting(
        None,
        OptionSpec(
            ("--include-path", "--include_path"),
            "Folder of extra lm-eval task YAMLs.",
            TASKS_PANEL,
            cli_type=Path | None,
            parse=str,
            fingerprint=True,
            recorded=True,
            files=True,
        ),
    )
    squad_data: str | None = setting(
        None,
        OptionSpec(
            ("--squad-data",),
            "Local SQuAD v1.1 JSON (or .jsonl) instead of the hub's rajpurkar/squad.",
            TASKS_PANEL,
            cli_type=Path | None,
            parse=str,
            fingerprint=True,
            recorded=True,
            files=True,
        ),
    )
    # Run the Python a local task YAML names (lm-eval's `!function`).
    trust_task_code: bool = setting(
        False,
        OptionSpec(
            ("--trust-task-code",),
            "Run the Python that a local task YAML names (lm-eval's !function); refused without it.",
            TASKS_PANEL,
        ),
    )
    engine: str = setting(
        "auto",
        OptionSpec(
            ("--engine",),
            "auto: shared-prefix for loglikelihood tasks, simple otherwise; simple: one full evaluation per "
            "removed block; shared: reuse the baseline's states of blocks before the removed one.",
            SCALE_PANEL,
            cli_type=Literal[ENGINES],
        ),
    )
    # What a variant removes: a block, or block l's attention / MLP sublayer.
    unit: str = setting(
        "block",
        OptionSpec(
            ("--unit",),
            "What each variant removes: block (the whole block), attention or mlp (that sublayer's output "
            "is zero, as if its output projection were; MoE: every expert).",
            fingerprint=True,
            recorded=True,
            older_default=True,
        ),
    )
    # With unit "block": blocks [l, l+span) leave together.
    span: int = setting(
        1,
        OptionSpec(
            ("--span",),
            "Remove n consecutive blocks [l, l+n) per variant (L-n+1 variants; --layers picks the starts l).",
            fingerprint=True,
            recorded=True,
            minimum=1,
            older_default=True,
        ),
    )
    # Shared engine: compute a prefix shared by many requests once.
    prefix_reuse: bool = setting(
        True,
        OptionSpec(
            ("--prefix-reuse/--no-prefix-reuse",),
            "Shared engine: compute the key/value cache of a prompt prefix many requests share (few-shot "
            "examples) once per variant and run only the rest of each request.",
            SCALE_PANEL,
            fingerprint=True,
            recorded=True,
        ),
    )
    # Shared engine: recorded block inputs held at once. It splits the engine's batches (padding, so
    # rounding): fingerprinted.
    max_state_bytes: int = setting(DEFAULT_STATE_BYTES, MAX_STATE_MEMORY)
    log_samples: bool = setting(
        False,
        OptionSpec(
            ("--log-samples", "--log_samples"),
            "Also write every document's metric values, per variant, to <out>/samples/<task>.jsonl.",
            OUTPUT_PANEL,
        ),
    )
    # angular.json to rank-compare with ΔP (None: <out>/angular.json if there).
    angular: str | None = setting(
        None,
        OptionSpec(
            ("--angular",),
            "angular.json of the same model (checked: id or weights fingerprint, architecture, blocks): "
            "rank agreement of d(x^l, x^(l+n)) with ΔP, n = --span (default: <out>/angular.json when it exists "
            "and measured this model).",
            cli_type=Path | None,
            parse=str,
        ),
    )
    corpus: CorpusSpec = field(default_factory=CorpusSpec)  # the windows `--task corpus` scores on
    # Sequential: stop a variant once its anytime 95 % half-width is ≤ this.
    precision: float | None = setting(
        None,
        OptionSpec(
            ("--precision",),
            "Sequential: score documents in a seeded random order, in rounds, and stop each variant (prune-curve: "
            "each set scored, delta's and greedy's candidates included) once its anytime-valid 95 % interval of "
            "ΔP has half-width <= H, excludes 0, or the documents run out (0-1 scale, e.g. 0.05). lm-eval tasks "
            "with per-document metrics in [0, 1] only.",
            STATISTICS_PANEL,
            fingerprint=True,
            recorded=True,
            only_when="sequential",
        ),
    )
    round_size: int = setting(
        DEFAULT_ROUND_SIZE,
        OptionSpec(
            ("--round-size",),
            "With --precision: documents scored per round before every running variant is looked at again.",
            STATISTICS_PANEL,
            fingerprint=True,
            recorded=True,
            only_when="sequential",
            minimum=1,
        ),
    )
    # How `significant` is adjusted over variants × tasks × metrics.
    multiplicity: str = setting(
        DEFAULT_MULTIPLICITY,
        OptionSpec(
            ("--multiplicity",),
            "How the significance flags allow for testing every variant × task × metric of the run: holm "
            "(family-wise error 5 %), bh (false discovery rate 5 %, Benjamini–Hochberg) or none (each test at "
            "5 %). Only the flags and p_adjusted change; every measured number is the same.",
            STATISTICS_PANEL,
            cli_type=Literal[MULTIPLICITY_METHODS],
            recorded=True,
        ),
    )
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

    @property
    def sequential(self) -> bool:
        """Whether the run is sequential (--precision): it then records and fingerprints its rounds."""
        return self.precision is not None

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
