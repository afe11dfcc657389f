"""The options of one `layerprobe prune-curve` run, checked when built (before any file or weight is read).

Each of the curve's own settings is declared once, on its field (option_spec.py): the command's options
and the `settings` block of prune_curve.json come from here. It lives in core, beside PruneSpec, so the
command line builds its options without importing the prune room (torch, lm-eval).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from layerprobe.core.defaults import CURVE_MAX_FRACTION, CURVE_METHODS, CURVE_UNITS, DEFAULT_CURVE_METHODS
from layerprobe.core.errors import LayerprobeError
from layerprobe.core.option_spec import OptionSpec, setting
from layerprobe.core.prune_spec import PruneSpec

_, _, _, DELTA, GREEDY, RANDOM = CURVE_METHODS  # the strategies whose options the spec checks


def split_methods(text: str) -> tuple[str, ...]:
    """--methods a,b,c → ("a", "b", "c") (blanks dropped)."""
    return tuple(m.strip() for m in text.split(",") if m.strip())


@dataclass(frozen=True)
class PruneCurveSpec:
    """One `layerprobe prune-curve` run: the prune-drop options (tasks, corpus…) plus the curve's own.

    `methods` None runs the strategies of earlier versions: angular, last, and random when
    `baseline_seeds` asks for draws. `metric` is "TASK:METRIC" or "METRIC" (of the first task); None:
    the first task's primary metric. `unit` "sublayers" makes delta and greedy choose among every
    attention and MLP sublayer. `prune_drop` is a prune_drop.json whose single-block ΔP drives delta;
    `angular` an angular.json that angular and influence read (None: measured first on the corpus).
    The fields are in the order prune_curve.json records them.
    """

    # The scoring settings of `prune` that prune_curve.json records after the corpus, in this order.
    SCORING_RECORDED: ClassVar[tuple[str, ...]] = (
        "limit",
        "num_fewshot",
        "seed",
        "batch_size",
        "engine",
        "precision",
        "round_size",
    )

    prune: PruneSpec
    max_fraction: float = setting(
        CURVE_MAX_FRACTION,
        OptionSpec(
            ("--max-fraction",),
            "Largest fraction removed: n = 1 … ⌊fraction·L⌋ blocks (sublayers: ⌊fraction·2L⌋).",
            recorded=True,
        ),
    )
    methods: tuple[str, ...] | None = setting(
        None,
        OptionSpec(
            ("--methods",),
            f"Comma-separated strategies among {','.join(CURVE_METHODS)}: angular = Gromov's span of least "
            "angular change; last = the blocks before the final one; influence = the n blocks of least adjacent "
            "change; delta = the n units whose single removal hurt --metric least; greedy = remove the least "
            "harmful unit, re-score the rest, repeat; random = random spans. Default: angular,last (and random "
            "with --baseline-seeds).",
            cli_type=str | None,
            parse=split_methods,
            recorded=True,
            recorded_as="chosen_methods",  # the methods run, the default's included
        ),
    )
    # Recorded as the (task, metric, direction) it resolved to once the full model was scored.
    metric: str | None = setting(
        None,
        OptionSpec(
            ("--metric",),
            "TASK:METRIC (or METRIC of the first task) that delta and greedy choose by; default: the first "
            "task's primary metric (corpus: nll; an image classifier's kl, a headless tower's cosine_distance). "
            "Every task and metric is still scored.",
            recorded=True,
        ),
    )
    unit: str = setting(
        CURVE_UNITS[0],
        OptionSpec(
            ("--unit",),
            "What delta and greedy remove: block, or sublayers (every attention and every MLP sublayer a "
            "candidate; n counts sublayers).",
            recorded=True,
        ),
    )
    prune_drop: str | None = setting(
        None,
        OptionSpec(
            ("--prune-drop",),
            "prune_drop.json of the same model (single blocks) whose ΔP drives delta (default: measured first).",
            cli_type=Path | None,
            parse=str,
            recorded=True,
        ),
    )
    baseline_seeds: int = setting(
        0,
        OptionSpec(
            ("--baseline-seeds",),
            "Random draws (one span per n each; seeds --seed, --seed+1, …).",
            recorded=True,
            recorded_as="seeds",  # the draws' seeds
        ),
    )
    angular: str | None = setting(
        None,
        OptionSpec(
            ("--angular",),
            "angular.json of the same model (default: measured first on the corpus).",
            cli_type=Path | None,
            parse=str,
            recorded=True,  # None: measured in the run, on the corpus it records
        ),
    )

    def __post_init__(self) -> None:
        if not 0 < self.max_fraction <= 1:
            raise LayerprobeError(f"--max-fraction must be in (0, 1], got {self.max_fraction}.")
        if self.baseline_seeds < 0:
            raise LayerprobeError(f"--baseline-seeds must be >= 0, got {self.baseline_seeds}.")
        methods = self.methods
        if methods is not None:
            unknown = [m for m in methods if m not in CURVE_METHODS]
            if unknown or not methods or len(set(methods)) != len(methods):
                raise LayerprobeError(
                    f"--methods {','.join(methods)}: "
                    + (f"unknown {', '.join(unknown)}." if unknown else "give each method once."),
                    hint=f"Choose among {', '.join(CURVE_METHODS)}.",
                )
        if self.unit not in CURVE_UNITS:
            raise LayerprobeError(f"Unknown --unit {self.unit!r}.", hint=f"Use one of {', '.join(CURVE_UNITS)}.")
        chosen = self.chosen_methods
        if self.unit != CURVE_UNITS[0] and not {DELTA, GREEDY} & set(chosen):
            raise LayerprobeError(
                f"--unit {self.unit} is what delta and greedy choose among; --methods {','.join(chosen)} has neither.",
                hint="Add delta or greedy to --methods, or leave --unit out.",
            )
        if self.baseline_seeds and RANDOM not in chosen:
            raise LayerprobeError(
                f"--baseline-seeds {self.baseline_seeds} sets the random draws, but --methods {','.join(chosen)} "
                "has no random.",
                hint="Add random to --methods, or leave --baseline-seeds out.",
            )
        if self.prune_drop is not None and (DELTA not in chosen or self.unit != CURVE_UNITS[0]):
            raise LayerprobeError(
                "--prune-drop gives delta each block's ΔP: it needs delta in --methods and --unit block.",
                hint="Add delta to --methods (and leave --unit out), or leave --prune-drop out.",
            )
        task, _ = self.driver_choice
        if task not in self.prune.tasks:
            raise LayerprobeError(
                f"--metric {self.metric}: {task!r} is not one of the tasks ({', '.join(self.prune.tasks)}).",
                hint="Use --metric TASK:METRIC with a task given by --task, or just METRIC for the first task.",
            )

    @property
    def chosen_methods(self) -> tuple[str, ...]:
        """The strategies this run compares, in order."""
        if self.methods is not None:
            return self.methods
        return (*DEFAULT_CURVE_METHODS, RANDOM) if self.baseline_seeds else DEFAULT_CURVE_METHODS

    @property
    def seeds(self) -> list[int]:
        """The random draws' seeds: --seed, --seed+1, … (one draw when random is asked for without a count)."""
        draws = self.baseline_seeds or 1 if RANDOM in self.chosen_methods else 0
        return [self.prune.seed + i for i in range(draws)]

    @property
    def driver_choice(self) -> tuple[str, str | None]:
        """(task, metric) from --metric; metric None: the task's primary metric."""
        if self.metric is None:
            return self.prune.tasks[0], None
        task, colon, metric = self.metric.partition(":")
        return (task, metric or None) if colon else (self.prune.tasks[0], self.metric)
