"""The gate's verdict: pair a baseline's results with a candidate's, apply the rules, say pass or fail.

`compare_paths` pairs the inputs (two files, or two run directories), applies `gate.rules`, and returns a
`Verdict`; `gate.render` turns it into a terminal table, GitHub markdown, JSON or JUnit XML, and
`gate.figures` draws it. The `compare` command in cli.py maps it to exit 0 pass, 1 regression, 2 bad input.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from layerprobe.core import ResultError
from layerprobe.gate.depth_rules import depth_notes, depth_rules
from layerprobe.gate.rules import GateRules, RuleResult, angular_rules, angular_stderr_notes, prune_drop_rules
from layerprobe.results import RESULT_FILES, AngularResult, PruneDropResult, RunDir, load_gated_result


@dataclass(frozen=True)
class Side:
    """One input of a comparison: which file and which model, with its number of blocks L."""

    path: Path
    model: str
    revision: str | None
    commit: str | None
    num_layers: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "model": self.model,
            "revision": self.revision,
            "commit": self.commit,
            "num_layers": self.num_layers,
        }


@dataclass(frozen=True)
class KindComparison:
    """All rules of one result kind (angular or prune_drop) and the notes a reader needs to trust them."""

    kind: str
    baseline: Side
    candidate: Side
    results: list[RuleResult]
    notes: list[str]
    baseline_result: Any = field(repr=False, compare=False, default=None)
    candidate_result: Any = field(repr=False, compare=False, default=None)

    @property
    def passed(self) -> bool:
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
        return [r for c in self.comparisons for r in c.results]

    @property
    def failed(self) -> list[RuleResult]:
        return [r for r in self.results if not r.passed]

    @property
    def passed(self) -> bool:
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
    baseline: AngularResult | PruneDropResult,
    candidate: AngularResult | PruneDropResult,
    rules: GateRules,
    baseline_path: Path = Path("baseline"),
    candidate_path: Path = Path("candidate"),
) -> KindComparison:
    """Apply the rules of the results' kind. Layers are matched by index; a change in L is noted."""
    kind = _kind(baseline)
    if _kind(candidate) != kind:
        raise ResultError(
            f"Cannot compare a {kind} result ({baseline_path}) with a {_kind(candidate)} result ({candidate_path}).",
            hint="Pass two results of the same kind.",
        )
    if kind == "angular":
        for path, result in ((baseline_path, baseline), (candidate_path, candidate)):
            if not result.distance or any(len(row) != len(result.distance) for row in result.distance):
                raise ResultError(f"Malformed angular result {path}: the distance matrix is not square.")
        results = angular_rules(baseline, candidate, rules)
        notes = angular_stderr_notes(baseline, candidate) + _angular_notes(baseline, candidate)
    elif kind == "depth":
        results, notes = depth_rules(baseline, candidate, rules.max_rms_growth), depth_notes(baseline, candidate)
    else:
        results, notes = prune_drop_rules(baseline, candidate, rules)
        notes += _prune_drop_notes(baseline, candidate)
    sides = [_side(path, result) for path, result in ((baseline_path, baseline), (candidate_path, candidate))]
    if sides[0].num_layers != sides[1].num_layers:
        common = min(s.num_layers for s in sides)
        notes.insert(
            0,
            f"L differs: candidate {sides[1].num_layers} vs baseline {sides[0].num_layers} blocks "
            f"({sides[1].num_layers - sides[0].num_layers:+d}); per-layer values are matched by index "
            f"over blocks 0–{common - 1}, whole-stack rules use each model's own L",
        )
    return KindComparison(kind, sides[0], sides[1], results, notes, baseline, candidate)


# --- helpers -------------------------------------------------------------------------------------------

# Measurement settings that, when they differ, make the two runs measure different things: the verdict
# still stands, but a reader must know (tokens and positions change the noise; limit, few-shot and task
# version change the questions).
ANGULAR_WATCHED = ("dataset", "config", "split", "tokens", "positions", "seq_len")
SETTINGS_WATCHED = ("seed",)  # --limit and --num-fewshot are compared per task, as run
TASK_WATCHED = ("num_fewshot", "limit", "version")


def _angular_notes(baseline: AngularResult, candidate: AngularResult) -> list[str]:
    return [
        f"data.{k} differs: baseline {baseline.data.get(k)!r}, candidate {candidate.data.get(k)!r}"
        for k in ANGULAR_WATCHED
        if baseline.data.get(k) != candidate.data.get(k)
    ]


def _prune_drop_notes(baseline: PruneDropResult, candidate: PruneDropResult) -> list[str]:
    notes = [
        f"settings.{k} differs: baseline {baseline.settings.get(k)!r}, candidate {candidate.settings.get(k)!r}"
        for k in SETTINGS_WATCHED
        if k in baseline.settings and k in candidate.settings and baseline.settings[k] != candidate.settings[k]
    ]
    for task, drop in baseline.tasks.items():
        other = candidate.tasks.get(task)
        if other is None:
            continue
        for k in TASK_WATCHED:
            before, after = getattr(drop, k, None), getattr(other, k, None)
            if before != after and not (k == "version" and None in (before, after)):
                notes.append(f"{task}: {k} differs: baseline {before!r}, candidate {after!r}")
    return notes


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


def _kind(result: Any) -> str:
    if type(result).__name__ == "DepthResult":
        return "depth"
    return "angular" if isinstance(result, AngularResult) else "prune_drop"


def _side(path: Path, result: AngularResult | PruneDropResult) -> Side:
    layers = result.num_layers if hasattr(result, "num_layers") else result.model.num_layers
    return Side(path, result.model.id, result.model.revision, result.model.commit, int(layers))
