"""The gate's verdict: pair a baseline's results with a candidate's, apply the rules, say pass or fail.

`compare_paths` pairs the inputs (two files, or two run directories), applies the rules of their kind
(`gate.rules`), and returns a `Verdict`; `gate.render` turns it into a terminal table, GitHub markdown,
JSON or JUnit XML, and `gate.figures` draws it. The `compare` command maps it to exit 0 pass,
1 regression, 2 bad input.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from layerprobe.core import ResultError
from layerprobe.gate.rules.angular import angular_notes, angular_rules
from layerprobe.gate.rules.answers import AnswerTests, answer_tests
from layerprobe.gate.rules.depth import depth_notes, depth_rules
from layerprobe.gate.rules.heal import heal_notes, heal_rules
from layerprobe.gate.rules.prune_drop import prune_drop_notes, prune_drop_rules
from layerprobe.gate.rules.record import RuleResult
from layerprobe.gate.rules.thresholds import GateRules
from layerprobe.results import (
    RESULT_FILES,
    AngularResult,
    DepthResult,
    HealResult,
    PruneDropResult,
    RunDir,
    load_gated_result,
)

# The result kinds the gate compares.
ComparedResult = AngularResult | PruneDropResult | DepthResult | HealResult


@dataclass(frozen=True)
class Side:
    """One input of a comparison: which file and which model, with its number of blocks L."""

    path: Path
    model: str
    revision: str | None
    commit: str | None
    num_layers: int

    def to_dict(self) -> dict[str, str | int | None]:
        """The side as the JSON verdict reports it."""
        return {
            "path": str(self.path),
            "model": self.model,
            "revision": self.revision,
            "commit": self.commit,
            "num_layers": self.num_layers,
        }


@dataclass(frozen=True)
class KindComparison:
    """All rules of one result kind and the notes a reader needs to trust them (and the results, to draw them)."""

    kind: str
    baseline: Side
    candidate: Side
    results: list[RuleResult]
    notes: list[str]
    answers: AnswerTests | None = None  # prune-drop with per-document answers on both sides: McNemar tests
    baseline_result: ComparedResult | None = field(repr=False, compare=False, default=None)
    candidate_result: ComparedResult | None = field(repr=False, compare=False, default=None)

    @property
    def passed(self) -> bool:
        """Whether every rule of this kind passed."""
        return all(r.passed for r in self.results)


@dataclass(frozen=True)
class Verdict:
    """The outcome of `compare`: `.passed` is what CI acts on (exit 0 or 1)."""

    baseline: Path
    candidate: Path
    rules: GateRules
    comparisons: list[KindComparison]
    skipped: list[str]

    @property
    def results(self) -> list[RuleResult]:
        """Every rule of every compared kind, in order."""
        return [r for c in self.comparisons for r in c.results]

    @property
    def failed(self) -> list[RuleResult]:
        """The rules that failed: the regressions."""
        return [r for r in self.results if not r.passed]

    @property
    def passed(self) -> bool:
        """Pass ⇔ no rule failed."""
        return not self.failed


def compare_paths(baseline: str | Path, candidate: str | Path, rules: GateRules | None = None) -> Verdict:
    """Compare two result files of one kind, or every kind two run directories both contain.

    Raises:
        ResultError: a path is missing, a file and a directory are mixed, the kinds differ, the
            directories share no result, or a file is unreadable or malformed.
    """
    baseline, candidate, rules = Path(baseline), Path(candidate), rules or GateRules()
    pairs, skipped = _pair_inputs(baseline, candidate)
    comparisons = [compare_results(load_gated_result(b), load_gated_result(c), rules, b, c) for b, c in pairs]
    return Verdict(baseline, candidate, rules, comparisons, skipped)


def compare_results(
    baseline: ComparedResult,
    candidate: ComparedResult,
    rules: GateRules,
    baseline_path: Path = Path("baseline"),
    candidate_path: Path = Path("candidate"),
) -> KindComparison:
    """Apply the rules of the results' kind. Layers are matched by index; a change in L is noted."""
    kind = _kind(baseline)
    answers = None
    if _kind(candidate) != kind:
        raise ResultError(
            f"Cannot compare a {kind} result ({baseline_path}) with a {_kind(candidate)} result ({candidate_path}).",
            hint="Pass two results of the same kind.",
        )
    if isinstance(baseline, AngularResult) and isinstance(candidate, AngularResult):
        for path, result in ((baseline_path, baseline), (candidate_path, candidate)):
            if not result.distance or any(len(row) != len(result.distance) for row in result.distance):
                raise ResultError(f"Malformed angular result {path}: the distance matrix is not square.")
        results, notes = angular_rules(baseline, candidate, rules), angular_notes(baseline, candidate)
    elif isinstance(baseline, DepthResult) and isinstance(candidate, DepthResult):
        results, notes = depth_rules(baseline, candidate, rules.max_rms_growth), depth_notes(baseline, candidate)
    elif isinstance(baseline, HealResult) and isinstance(candidate, HealResult):
        results = heal_rules(baseline, candidate, rules.max_heal_gap, rules.heal_metric)
        notes = heal_notes(baseline, candidate, rules.max_heal_gap)
    elif isinstance(baseline, PruneDropResult) and isinstance(candidate, PruneDropResult):
        results, notes = prune_drop_rules(baseline, candidate, rules)
        answers, inferiority, answer_notes = answer_tests(baseline, candidate, (baseline_path, candidate_path), rules)
        results += inferiority
        notes += answer_notes + prune_drop_notes(baseline, candidate)
    else:  # e.g. two prune_curve.json: load_result reads them, but the gate has no rules for them
        raise TypeError(f"compare has no rules for {type(baseline).__name__}")
    sides = [_side(path, result) for path, result in ((baseline_path, baseline), (candidate_path, candidate))]
    if sides[0].num_layers != sides[1].num_layers:
        common = min(s.num_layers for s in sides)
        notes.insert(
            0,
            f"L differs: candidate {sides[1].num_layers} vs baseline {sides[0].num_layers} blocks "
            f"({sides[1].num_layers - sides[0].num_layers:+d}); per-layer values are matched by index "
            f"over blocks 0–{common - 1}, whole-stack rules use each model's own L",
        )
    return KindComparison(kind, sides[0], sides[1], results, notes, answers, baseline, candidate)


# --- helpers -------------------------------------------------------------------------------------------


def _pair_inputs(baseline: Path, candidate: Path) -> tuple[list[tuple[Path, Path]], list[str]]:
    for role, path in (("baseline", baseline), ("candidate", candidate)):
        if not path.exists():
            raise ResultError(
                f"The {role} {path} does not exist.",
                hint="Pass a result JSON (angular.json, prune_drop.json) or a run directory.",
            )
    if baseline.is_dir() != candidate.is_dir():
        raise ResultError("Compare two result files or two run directories, not one of each.")
    if not baseline.is_dir():
        return [(baseline, candidate)], []
    pairs, skipped = [], []
    for kind in RESULT_FILES:
        files = (RunDir(baseline).result_json(kind), RunDir(candidate).result_json(kind))
        here = [files[0].is_file(), files[1].is_file()]
        if all(here):
            pairs.append(files)
        elif any(here):
            role, path = ("baseline", files[0]) if here[0] else ("candidate", files[1])
            skipped.append(f"{kind}: only in the {role} ({path}); skipped")
    if not pairs:
        raise ResultError(
            f"{baseline} and {candidate} share no result ({' or '.join(RESULT_FILES.values())}).",
            hint="Run the same layerprobe commands for both checkpoints.",
        )
    return pairs, skipped


def _kind(result: ComparedResult) -> str:
    if isinstance(result, DepthResult):
        return "depth"
    if isinstance(result, HealResult):
        return "heal"
    return "angular" if isinstance(result, AngularResult) else "prune_drop"


def _side(path: Path, result: ComparedResult) -> Side:
    layers = result.model.num_layers if isinstance(result, PruneDropResult | HealResult) else result.num_layers
    return Side(path, result.model.id, result.model.revision, result.model.commit, int(layers))
