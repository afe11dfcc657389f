"""The options of one `layerprobe prune-curve` run, checked when built (before any file or weight is read)."""

from __future__ import annotations

from dataclasses import dataclass

from layerprobe.core import (
    CURVE_MAX_FRACTION,
    CURVE_METHODS,
    CURVE_UNITS,
    DEFAULT_CURVE_METHODS,
    LayerprobeError,
    PruneSpec,
)
from layerprobe.prune.strategies import DELTA, GREEDY, RANDOM


@dataclass(frozen=True)
class PruneCurveSpec:
    """One `layerprobe prune-curve` run: the prune-drop options (tasks, corpus…) plus the curve's own.

    `methods` None runs the strategies of earlier versions: angular, last, and random when
    `baseline_seeds` asks for draws. `metric` is "TASK:METRIC" or "METRIC" (of the first task); None:
    the first task's primary metric. `unit` "sublayers" makes delta and greedy choose among every
    attention and MLP sublayer. `prune_drop` is a prune_drop.json whose single-block ΔP drives delta.
    """

    prune: PruneSpec
    max_fraction: float = CURVE_MAX_FRACTION
    baseline_seeds: int = 0
    methods: tuple[str, ...] | None = None
    metric: str | None = None
    unit: str = CURVE_UNITS[0]
    prune_drop: str | None = None

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
