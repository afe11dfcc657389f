"""The rules `layerprobe compare` gates on: their thresholds, where each came from, and the checks.

The thresholds are the contract a CI job signs, so they live in one place with their provenance
(default < rules file < command-line flag), and every check returns a `RuleResult` that carries its own
criterion and measured numbers: a verdict must explain itself without the reader opening the code.
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from layerprobe.core import LayerprobeError, ResultError
from layerprobe.results import LAZY_THRESHOLD, AngularResult, MetricDrop, PruneDropResult, angular_summary

# A change exactly equal to its tolerance passes; this slack keeps float rounding from failing it.
EPS = 1e-9
SECTIONS = {
    "angular": ("lazy_threshold", "max_lazy_increase", "adjacent_tolerance"),
    "prune_drop": ("max_drop", "se_factor", "metric", "metrics"),
    "depth": ("max_rms_growth",),
}


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
        sources: threshold name → "rules file" or "flag"; absent means the default.
    """

    lazy_threshold: float = LAZY_THRESHOLD
    max_lazy_increase: int = 0
    adjacent_tolerance: float = 0.02
    max_drop: float = 0.01
    se_factor: float = 2.0
    metric: str | None = None
    metrics: dict[str, str] = field(default_factory=dict)
    max_rms_growth: float = 1.25  # depth: RMS(x^L)/RMS(x^0) may grow by this factor over the baseline's
    sources: dict[str, str] = field(default_factory=dict)

    def metric_for(self, task: str, primary: str) -> str:
        return self.metrics.get(task) or self.metric or primary

    def to_dict(self) -> dict[str, dict[str, Any]]:
        return {
            section: {
                name: {"value": getattr(self, name), "source": self.sources.get(name, "default")} for name in names
            }
            for section, names in SECTIONS.items()
        }


@dataclass(frozen=True)
class RuleResult:
    """One check of one kind (and, for prune-drop, one task): what was required, measured and decided.

    `change` is how much worse the candidate is in the rule's own units (positive = worse) and `limit`
    the largest change that passes, so every rule reads the same way: passed ⇔ change ≤ limit. People
    read `difference` (candidate − baseline) with `worse_if` ("higher" or "lower": which sign of the
    difference counts against the candidate); that is what the table and markdown show.
    """

    kind: str
    rule: str
    subject: str | None
    criterion: str
    thresholds: dict[str, Any]
    baseline: float | None
    candidate: float | None
    change: float | None
    limit: float
    passed: bool
    message: str
    details: dict[str, Any] = field(default_factory=dict)
    worse_if: str = "higher"
    scale: str = "absolute"  # "ratio": change and limit are candidate / baseline (depth's rms_growth)

    @property
    def difference(self) -> float | None:
        """The candidate minus the baseline, in the rule's units (None when either is missing).

        For a "ratio" rule it is candidate / baseline, the quantity its limit bounds.
        """
        if self.scale == "ratio":
            return self.change
        if self.baseline is None or self.candidate is None:
            return None
        if self.baseline == self.candidate:  # equal infinities are no change, as in `change`
            return 0 if isinstance(self.baseline, int) else 0.0
        return self.candidate - self.baseline

    @property
    def allowed_difference(self) -> float:
        """The bound on `difference` that passes: ≤ +limit when higher is worse, ≥ −limit when lower is."""
        return self.limit if self.worse_if == "higher" else -self.limit

    @property
    def name(self) -> str:
        return f"{self.rule}[{self.subject}]" if self.subject else self.rule


def load_rules(path: str | Path | None = None, **flags: Any) -> GateRules:
    """Thresholds from the defaults, then the TOML file at `path`, then the flags that are not None.

    Raises:
        LayerprobeError: the file is unreadable, has an unknown section or key, or a value is invalid.
    """
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    if path is not None:
        for name, value in read_rules_file(Path(path)).items():
            values[name], sources[name] = value, "rules file"
    for name, value in flags.items():
        if name not in _ALL_KEYS:
            raise TypeError(f"load_rules() got an unknown threshold {name!r}")
        if value is not None:
            values[name], sources[name] = _checked(name, value, "--" + name.replace("_", "-")), "flag"
    return GateRules(**values, sources=sources)


def read_rules_file(path: Path) -> dict[str, Any]:
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
    values: dict[str, Any] = {}
    for section, table in data.items():
        if section not in SECTIONS:
            home = next((s for s, names in SECTIONS.items() if section in names), None)
            hint = f"Put {section} under [{home}]." if home else _did_you_mean(section, SECTIONS)
            raise LayerprobeError(f"Unknown section or key {section!r} in rules file {path}.", hint=hint)
        if not isinstance(table, dict):
            raise LayerprobeError(f"[{section}] in rules file {path} must be a table.")
        for name, value in table.items():
            if name not in SECTIONS[section]:
                raise LayerprobeError(
                    f"Unknown rule {name!r} in [{section}] of rules file {path}.",
                    hint=_did_you_mean(name, SECTIONS[section]),
                )
            values[name] = _checked(name, value, f"{section}.{name} in {path}")
    return values


def angular_rules(baseline: AngularResult, candidate: AngularResult, rules: GateRules) -> list[RuleResult]:
    """Lazy-block growth and the fall of the mean adjacent distance, each over each model's whole stack.

    Both are recomputed from the distance matrices with `rules.lazy_threshold`: the stored summary
    may have been written with another threshold.
    """
    threshold = rules.lazy_threshold
    base, cand = angular_summary(baseline.distance, threshold), angular_summary(candidate.distance, threshold)
    growth = cand["lazy_count"] - base["lazy_count"]
    new = sorted(set(cand["lazy_layers"]) - set(base["lazy_layers"]))
    lazy = RuleResult(
        "angular",
        "lazy_blocks",
        None,
        f"lazy blocks (d(x^l, x^l+1) < {threshold:g}) may grow by ≤ {rules.max_lazy_increase}",
        {"lazy_threshold": threshold, "max_lazy_increase": rules.max_lazy_increase},
        base["lazy_count"],
        cand["lazy_count"],
        growth,
        rules.max_lazy_increase,
        growth <= rules.max_lazy_increase,
        f"{cand['lazy_count']} of {candidate.num_layers} candidate blocks are lazy vs {base['lazy_count']} of "
        f"{baseline.num_layers} in the baseline ({growth:+d}, allowed +{rules.max_lazy_increase}); "
        f"candidate lazy blocks {cand['lazy_layers']}, baseline {base['lazy_layers']}",
        {
            "baseline_lazy_layers": base["lazy_layers"],
            "candidate_lazy_layers": cand["lazy_layers"],
            "newly_lazy_by_index": new,
            "nonfinite_adjacent": {"baseline": _nonfinite(base["adjacent"]), "candidate": _nonfinite(cand["adjacent"])},
        },
        worse_if="higher",
    )
    results = [lazy, _mean_adjacent_rule(base["mean_adjacent"], cand["mean_adjacent"], rules.adjacent_tolerance)]
    if baseline.distance_stderr is not None and candidate.distance_stderr is not None:
        results.append(_adjacent_distance_rule(baseline, candidate, rules.adjacent_tolerance, rules.se_factor))
    return results


def angular_stderr_notes(baseline: AngularResult, candidate: AngularResult) -> list[str]:
    """Say so when a result has no `distance_stderr` (written before it existed): the no-stderr fallback."""
    missing = [
        role for role, result in (("baseline", baseline), ("candidate", candidate)) if result.distance_stderr is None
    ]
    if not missing:
        return []
    return [
        f"no distance_stderr in the {' and '.join(missing)} (written before stderrs existed): no-stderr fallback, "
        "rule adjacent_distance skipped; lazy_blocks and mean_adjacent use their absolute thresholds only"
    ]


def _adjacent_distance_rule(
    baseline: AngularResult, candidate: AngularResult, tolerance: float, factor: float
) -> RuleResult:
    """d(x^l, x^(l+1)) block by block (matched by index): a fall counts only beyond its noise.

    Allowed fall at block l: max(tolerance, factor × sqrt(se_base² + se_cand²)), the two entries'
    standard errors from `distance_stderr`; the absolute tolerance is the floor, so a tiny stderr from a
    long corpus does not turn an irrelevant change into a failure. An unknown (NaN) stderr leaves the
    floor; an unmeasured (NaN) distance on one side cannot be verified and fails.
    """
    rows = []
    for layer in range(min(baseline.num_layers, candidate.num_layers)):
        before, after = baseline.distance[layer][layer + 1], candidate.distance[layer][layer + 1]
        se_before, se_after = baseline.distance_stderr[layer][layer + 1], candidate.distance_stderr[layer][layer + 1]
        noise = factor * math.hypot(se_before, se_after)
        allowed = max(tolerance, noise) if math.isfinite(noise) else tolerance
        fall = 0.0 if before == after else before - after
        rows.append(
            {
                "layer": layer,
                "baseline": before,
                "candidate": after,
                "baseline_stderr": se_before,
                "candidate_stderr": se_after,
                "fall": fall,
                "allowed": allowed,
                "passed": _within(fall, allowed),
            }
        )
    worst = max(rows, key=lambda r: math.inf if math.isnan(r["fall"]) else r["fall"] - r["allowed"])
    failed = [r["layer"] for r in rows if not r["passed"]]
    if failed:
        message = (
            f"block(s) {failed} turn their input less in the candidate than allowed; worst: block "
            f"{worst['layer']} d(x^l, x^l+1) {worst['candidate']:.4f} vs {worst['baseline']:.4f} (fell by "
            f"{worst['fall']:.4f} > {worst['allowed']:.4f})"
        )
    else:
        message = (
            f"all {len(rows)} common blocks within max({tolerance:g}, {factor:g} × SE); closest: block "
            f"{worst['layer']} {_by(worst['fall'], 'fell', 'rose')} (allowed fall ≤ {worst['allowed']:.4f})"
        )
    return RuleResult(
        "angular",
        "adjacent_distance",
        None,
        f"d(x^l, x^l+1) per block may fall by ≤ max({tolerance:g}, {factor:g} × combined SE)",
        {"adjacent_tolerance": tolerance, "se_factor": factor},
        worst["baseline"],
        worst["candidate"],
        worst["fall"],
        worst["allowed"],
        not failed,
        message,
        {"failed_layers": failed, "layers": rows},
        worse_if="lower",
    )


def prune_drop_rules(
    baseline: PruneDropResult, candidate: PruneDropResult, rules: GateRules
) -> tuple[list[RuleResult], list[str]]:
    """Per task both results have: the full model's score, and ΔP of every layer both evaluated.

    Returns:
        The rule results, and notes on tasks only one result has (they are skipped, not failed).

    Raises:
        ResultError: no common task, the gated metric is missing from one side, the metrics disagree
            on direction, or no layer was evaluated in both.
    """
    notes = [
        f"task {task!r} only in the {role}: skipped"
        for role, mine, other in (("baseline", baseline, candidate), ("candidate", candidate, baseline))
        for task in mine.tasks
        if task not in other.tasks
    ]
    common = [task for task in baseline.tasks if task in candidate.tasks]
    if not common:
        raise ResultError(
            f"The prune-drop results share no task (baseline: {sorted(baseline.tasks)}, "
            f"candidate: {sorted(candidate.tasks)}).",
            hint="Run both with the same --tasks.",
        )
    results = []
    for task in common:
        name = rules.metric_for(task, baseline.tasks[task].primary_metric)
        base, cand = _metric(baseline, task, name, "baseline"), _metric(candidate, task, name, "candidate")
        if base.higher_is_better != cand.higher_is_better:
            raise ResultError(f"{task}/{name}: higher_is_better differs between baseline and candidate.")
        results += [
            _baseline_score_rule(task, name, base, cand, rules.max_drop),
            _layer_delta_rule(task, name, base, cand, rules.se_factor),
        ]
        if not (base.paired and cand.paired):
            lacking = " and ".join(role for role, m in (("baseline", base), ("candidate", cand)) if not m.paired)
            notes.append(
                f"{task}/{name}: the {lacking} has no paired ΔP stderrs (written before they existed); "
                "layer_delta used the unpaired fallback, the pruned scores' own stderrs"
            )
    return results, notes


def _mean_adjacent_rule(base: float | None, cand: float | None, tolerance: float) -> RuleResult:
    criterion = f"mean d(x^l, x^l+1) may fall by ≤ {tolerance:g}"
    fall = None if base is None or cand is None else base - cand
    if fall is None:
        side = "baseline" if base is None else "candidate"
        message = f"the {side} has no finite adjacent distance, so the mean cannot be compared"
    else:
        message = (
            f"mean adjacent distance {cand:.4f} vs {base:.4f} in the baseline ({_by(fall, 'fell', 'rose')}, "
            f"may fall by ≤ {tolerance:g})"
        )
    return RuleResult(
        "angular",
        "mean_adjacent",
        None,
        criterion,
        {"adjacent_tolerance": tolerance},
        base,
        cand,
        fall,
        tolerance,
        fall is not None and _within(fall, tolerance),
        message,
        worse_if="lower",
    )


def _baseline_score_rule(task: str, name: str, base: MetricDrop, cand: MetricDrop, max_drop: float) -> RuleResult:
    worse = _worsening(base.baseline, cand.baseline, base.higher_is_better)
    direction = "higher" if base.higher_is_better else "lower"
    message = (
        f"{name} {cand.baseline:.4f} vs {base.baseline:.4f} in the baseline ({direction} is better; "
        f"{_by(worse, 'worse', 'better')}, allowed worse by ≤ {max_drop:g})"
    )
    return RuleResult(
        "prune_drop",
        "baseline_score",
        f"{task}/{name}",
        f"full-model score may get worse by ≤ {max_drop:g}",
        {"max_drop": max_drop, "higher_is_better": base.higher_is_better},
        base.baseline,
        cand.baseline,
        worse,
        max_drop,
        _within(worse, max_drop),
        message,
        worse_if=_worse_if(base.higher_is_better),
    )


def _layer_delta_rule(task: str, name: str, base: MetricDrop, cand: MetricDrop, factor: float) -> RuleResult:
    """ΔP(l) of the candidate vs the baseline, layer by layer over the layers both evaluated.

    "Worse" is sign-aware: for a higher-is-better metric, a more negative ΔP (removing the block costs
    more) is worse. Allowed: factor × sqrt(se_base² + se_cand²), where se is each model's *paired*
    stderr of ΔP(l) (`delta_stderr`: per-document differences, so the shared document noise cancels).
    The two models are scored independently, so their paired stderrs add in quadrature. When either
    file predates paired stderrs, the pruned scores' own stderrs are used (the unpaired fallback,
    several times wider), and the rule says so.
    """
    paired = base.paired and cand.paired
    before, after = _by_layer(base, task, "baseline", paired), _by_layer(cand, task, "candidate", paired)
    shared = sorted(set(before) & set(after))
    if not shared:
        raise ResultError(
            f"{task}: no layer was evaluated in both the baseline and the candidate.",
            hint="Run prune-drop on both with the same --layers.",
        )
    rows, missing = [], {"baseline": [], "candidate": []}
    for layer in shared:
        (b_delta, b_se), (c_delta, c_se) = before[layer], after[layer]
        for role, se in (("baseline", b_se), ("candidate", c_se)):
            if se is None:
                missing[role].append(layer)
        worse = _worsening(b_delta, c_delta, base.higher_is_better)
        allowed = factor * math.hypot(b_se or 0.0, c_se or 0.0)
        rows.append(
            {
                "layer": layer,
                "baseline_delta": b_delta,
                "candidate_delta": c_delta,
                "worsening": worse,
                "allowed": allowed,
                "passed": _within(worse, allowed),
            }
        )
    worst = max(rows, key=lambda r: math.inf if math.isnan(r["worsening"]) else r["worsening"] - r["allowed"])
    failed = [r for r in rows if not r["passed"]]
    if failed:
        message = (
            f"removing layer(s) {[r['layer'] for r in failed]} costs more in the candidate than allowed; "
            f"worst: layer {worst['layer']} ΔP {worst['candidate_delta']:.4f} vs "
            f"{worst['baseline_delta']:.4f} (worse by {worst['worsening']:.4f} > {factor:g} × SE = "
            f"{worst['allowed']:.4f})"
        )
    else:
        message = (
            f"all {len(rows)} common layers within {factor:g} × SE; closest: layer {worst['layer']} "
            f"{_by(worst['worsening'], 'worse', 'better')} (allowed worse by ≤ {worst['allowed']:.4f})"
        )
    for role, layers in missing.items():
        if layers:
            message += f"; {role} stderr missing for layers {layers}, counted as 0"
    if not paired:
        message += "; unpaired fallback: the pruned scores' own stderrs (no paired ΔP stderrs in a file)"
    stderr_kind = "paired ΔP stderrs" if paired else "pruned scores' stderrs (unpaired fallback)"
    return RuleResult(
        "prune_drop",
        "layer_delta",
        f"{task}/{name}",
        f"ΔP(l) may get worse by ≤ {factor:g} × sqrt(se_base² + se_cand²) per layer, se = {stderr_kind}",
        {"se_factor": factor, "higher_is_better": base.higher_is_better},
        worst["baseline_delta"],
        worst["candidate_delta"],
        worst["worsening"],
        worst["allowed"],
        not failed,
        message,
        {
            "stderr": "paired" if paired else "unpaired",
            "common_layers": shared,
            "failed_layers": [r["layer"] for r in failed],
            "stderr_missing": missing,
            "layers": rows,
        },
        worse_if=_worse_if(base.higher_is_better),
    )


def _worsening(base: float, cand: float, higher_is_better: bool) -> float:
    """How much worse `cand` is than `base` (positive = worse); equal infinities are no change."""
    if base == cand:
        return 0.0
    return (base - cand) if higher_is_better else (cand - base)


def _worse_if(higher_is_better: bool) -> str:
    return "lower" if higher_is_better else "higher"


def _by(change: float, worse: str, better: str) -> str:
    return f"{worse if change > 0 else better} by {abs(change):.4f}" if change else "unchanged"


def _within(change: float, limit: float) -> bool:
    return not math.isnan(change) and change <= limit + EPS  # NaN cannot be verified, so it fails


def _metric(result: PruneDropResult, task: str, name: str, role: str) -> MetricDrop:
    metrics = result.tasks[task].metrics
    if name not in metrics:
        raise ResultError(
            f"The {role} has no metric {name!r} for task {task!r} (it has {list(metrics)}).",
            hint="Name the metric to gate on with metric = ... in [prune_drop] of --rules.",
        )
    return metrics[name]


def _by_layer(metric: MetricDrop, task: str, role: str, paired: bool) -> dict[int, tuple[float, float | None]]:
    """Layer → (ΔP, its stderr): the paired `delta_stderr`, or with `paired` False the pruned score's own."""
    errors = metric.delta_stderr if paired else metric.stderr
    if not len(metric.layers) == len(metric.pruned) == len(errors or []):
        raise ResultError(f"Malformed {role} result: {task} has layers, pruned and stderr of different lengths.")
    return {layer: (delta, se) for layer, delta, se in zip(metric.layers, metric.delta, errors, strict=True)}


def _nonfinite(values: list[float]) -> list[int]:
    return [index for index, value in enumerate(values) if not math.isfinite(value)]


def _checked(name: str, value: Any, where: str) -> Any:
    """Validate one threshold: a wrong type or range is a user error named with where it was set."""
    if name == "metric" and isinstance(value, str) and value:
        return value
    if (
        name == "metrics"
        and isinstance(value, dict)
        and all(isinstance(k, str) and isinstance(v, str) and v for k, v in value.items())
    ):
        return dict(value)
    if name in ("metric", "metrics"):
        shape = "a metric name" if name == "metric" else 'a table of task = "metric"'
        raise LayerprobeError(f"{where} must be {shape}, got {value!r}.")
    number = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if name == "max_lazy_increase":
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if not (number and isinstance(value, int) and value >= 0):
            raise LayerprobeError(f"{where} must be a whole number ≥ 0, got {value!r}.")
        return value
    if name == "lazy_threshold" and not (number and 0 < value <= 1):
        raise LayerprobeError(f"{where} must be in (0, 1] (angular distances lie in [0, 1]), got {value!r}.")
    if not (number and value >= 0):
        raise LayerprobeError(f"{where} must be a number ≥ 0, got {value!r}.")
    return float(value)


def _did_you_mean(name: str, choices: Any) -> str:
    close = difflib.get_close_matches(name, list(choices), n=1)
    known = ", ".join(choices)
    return f"Did you mean {close[0]!r}? Known: {known}." if close else f"Known: {known}."


_ALL_KEYS = {f.name for f in fields(GateRules)} - {"sources"}
