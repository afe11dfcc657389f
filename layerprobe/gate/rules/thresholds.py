"""The thresholds `layerprobe compare` gates on, and where each came from.

The thresholds are the contract a CI job signs, so they live in one place with their provenance
(default < rules file < command-line flag). A wrong value or a misspelt name is a user error that names
where it was set, with a suggestion: a typo silently ignored would leave a default in force while the
author believes otherwise.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Collection
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from layerprobe.core import LayerprobeError
from layerprobe.results import HEAL_METRICS, LAZY_THRESHOLD

# The rules file's sections and the thresholds each may set (also the layout of `GateRules.to_dict`).
SECTIONS = {
    "angular": ("lazy_threshold", "max_lazy_increase", "adjacent_tolerance"),
    "prune_drop": ("max_drop", "se_factor", "metric", "metrics", "max_drop_upper", "max_flip_rate"),
    "depth": ("max_rms_growth",),
    "heal": ("max_heal_gap", "heal_metric"),
}

# One threshold's value: a number (a count is an int), a metric name, or a table of task = "metric".
Threshold = float | str | dict[str, str]


@dataclass(frozen=True)
class GateRules:
    """Every threshold the gate applies; `sources` says which came from a rules file or a flag.

    Attributes:
        lazy_threshold: a block l is lazy when d(x^l, x^(l+1)) < this.
        max_lazy_increase: how many more lazy blocks the candidate may have than the baseline.
        adjacent_tolerance: how far the mean adjacent distance may fall (absolute).
        max_drop: how far a task's full-model score may get worse (absolute, metric units).
        se_factor: a layer's ΔP may get worse by at most this many combined standard errors; a block's
            adjacent distance may fall by at most this many combined `distance_stderr`s (rule
            adjacent_distance, floored at adjacent_tolerance).
        metric: metric gated for every task instead of the task's primary (first) one.
        metrics: per-task metric, overriding `metric`.
        max_drop_upper: non-inferiority margin: the one-sided 95 % upper bound of the full model's accuracy
            drop, from both runs' paired per-document answers, must be at most this (None: no such rule).
        max_flip_rate: generating tasks: the share of documents whose full-model answer (after each of the
            task's filters) differs between the two runs may be at most this (None: no such rule).
        max_rms_growth: depth: RMS(x^L)/RMS(x^0) may grow by at most this factor over the baseline's.
        max_heal_gap: heal: the one-sided 95 % upper bound of how much worse the candidate's healed model
            is than its original on held-out `heal_metric` may be at most this (None: no such rule).
        heal_metric: heal: nll, kl or top1_agreement.
        sources: threshold name → "rules file" or "flag"; absent means the default.
    """

    lazy_threshold: float = LAZY_THRESHOLD
    max_lazy_increase: int = 0
    adjacent_tolerance: float = 0.02
    max_drop: float = 0.01
    se_factor: float = 2.0
    metric: str | None = None
    metrics: dict[str, str] = field(default_factory=dict)
    max_drop_upper: float | None = None
    max_flip_rate: float | None = None
    max_rms_growth: float = 1.25  # depth: RMS(x^L)/RMS(x^0) may grow by this factor over the baseline's
    max_heal_gap: float | None = None  # heal: one-sided 95 % bound of healed − original (None: no rule)
    heal_metric: str = "nll"  # heal: the held-out metric max_heal_gap bounds (nll, kl, top1_agreement)
    sources: dict[str, str] = field(default_factory=dict)

    def metric_for(self, task: str, primary: str) -> str:
        """The metric gated for `task`: its own override, else the global one, else its `primary` metric."""
        return self.metrics.get(task) or self.metric or primary

    def to_dict(self) -> dict[str, dict[str, dict[str, object]]]:
        """Section → threshold → {"value", "source"}: what the JSON verdict and JUnit properties report."""
        return {
            section: {
                name: {"value": getattr(self, name), "source": self.sources.get(name, "default")} for name in names
            }
            for section, names in SECTIONS.items()
        }


THRESHOLD_NAMES = frozenset(f.name for f in fields(GateRules)) - {"sources"}


def load_rules(path: str | Path | None = None, **flags: Threshold | None) -> GateRules:
    """Thresholds from the defaults, then the TOML file at `path`, then the flags that are not None.

    Raises:
        LayerprobeError: the file is unreadable, has an unknown section or key, or a value is invalid.
    """
    values: dict[str, Any] = {}  # threshold name → value, each checked against its field by check_threshold
    sources: dict[str, str] = {}
    if path is not None:
        for name, value in read_rules_file(Path(path)).items():
            values[name], sources[name] = value, "rules file"
    for name, flag in flags.items():
        if name not in THRESHOLD_NAMES:
            raise TypeError(f"load_rules() got an unknown threshold {name!r}")
        if flag is not None:
            values[name], sources[name] = check_threshold(name, flag, "--" + name.replace("_", "-")), "flag"
    return GateRules(**values, sources=sources)


def read_rules_file(path: Path) -> dict[str, Threshold]:
    """Read `[angular]` and `[prune_drop]` from a rules TOML; unknown names are errors, not ignored.

    A typo silently ignored would leave the default in force while the author believes otherwise, so
    an unknown name stops the gate (exit 2) with a suggestion.
    """
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        try:
            import tomli as tomllib
        except ModuleNotFoundError:
            raise LayerprobeError("Reading --rules on Python 3.10 needs tomli.", hint="pip install tomli") from None
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise LayerprobeError(
            f"Cannot read rules file {path}: {exc.strerror or exc}", hint="Pass an existing TOML file to --rules."
        ) from exc
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise LayerprobeError(f"Rules file {path} is not valid TOML: {exc}") from exc
    values: dict[str, Threshold] = {}
    for section, table in data.items():
        if section not in SECTIONS:
            home = next((s for s, names in SECTIONS.items() if section in names), None)
            hint = f"Put {section} under [{home}]." if home else did_you_mean(section, SECTIONS)
            raise LayerprobeError(f"Unknown section or key {section!r} in rules file {path}.", hint=hint)
        if not isinstance(table, dict):
            raise LayerprobeError(f"[{section}] in rules file {path} must be a table.")
        for name, value in table.items():
            if name not in SECTIONS[section]:
                raise LayerprobeError(
                    f"Unknown rule {name!r} in [{section}] of rules file {path}.",
                    hint=did_you_mean(name, SECTIONS[section]),
                )
            values[name] = check_threshold(name, value, f"{section}.{name} in {path}")
    return values


def check_threshold(name: str, value: object, where: str) -> Threshold:
    """Validate one threshold: a wrong type or range is a user error named with `where` it was set.

    Returns:
        The value in its field's type: a float, a whole count as an int, a metric name, or a copy of
        the task → metric table.
    """
    if name == "metric" and isinstance(value, str) and value:
        return value
    if name == "heal_metric":
        if value not in HEAL_METRICS:
            raise LayerprobeError(f"{where} must be one of {', '.join(HEAL_METRICS)}, got {value!r}.")
        return str(value)
    if (
        name == "metrics"
        and isinstance(value, dict)
        and all(isinstance(k, str) and isinstance(v, str) and v for k, v in value.items())
    ):
        return dict(value)
    if name in ("metric", "metrics"):
        shape = "a metric name" if name == "metric" else 'a table of task = "metric"'
        raise LayerprobeError(f"{where} must be {shape}, got {value!r}.")
    if name == "max_lazy_increase":
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if not (isinstance(value, int) and not isinstance(value, bool) and value >= 0):
            raise LayerprobeError(f"{where} must be a whole number ≥ 0, got {value!r}.")
        return value
    number = value if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) else None
    if name == "lazy_threshold" and not (number is not None and 0 < number <= 1):
        raise LayerprobeError(f"{where} must be in (0, 1] (angular distances lie in [0, 1]), got {value!r}.")
    if not (number is not None and number >= 0):
        raise LayerprobeError(f"{where} must be a number ≥ 0, got {value!r}.")
    return float(number)


def did_you_mean(name: str, choices: Collection[str]) -> str:
    """A hint for an unknown `name`: the closest of `choices`, if any is close, and all of them."""
    close = difflib.get_close_matches(name, list(choices), n=1)
    known = ", ".join(choices)
    return f"Did you mean {close[0]!r}? Known: {known}." if close else f"Known: {known}."
