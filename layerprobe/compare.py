"""`layerprobe compare`: gate a candidate checkpoint's results against a baseline's, for CI.

The library pairs the inputs (two files, or two run directories), applies `gate_rules`, and returns a
`Verdict`; the renderers in `compare_render.py` turn it into a terminal table, GitHub markdown, JSON or
JUnit XML. Exit status: 0 pass, 1 regression, 2 bad input (LayerprobeError).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from layerprobe.compare_render import build_table, check_format, render, render_junit
from layerprobe.errors import LayerprobeError, ResultError
from layerprobe.gate_rules import (
    GateRules,
    RuleResult,
    angular_rules,
    angular_stderr_notes,
    load_rules,
    prune_drop_rules,
)
from layerprobe.results import AngularResult, PruneDropResult, load_result

KIND_FILES = {"angular": "angular.json", "prune_drop": "prune_drop.json"}


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
    comparisons = [compare_results(load_result(b), load_result(c), rules, b, c) for b, c in pairs]
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
        results, notes = angular_rules(baseline, candidate, rules), angular_stderr_notes(baseline, candidate)
        watched = ("dataset", "config", "split", "positions", "seq_len")
        notes += [
            f"data.{k} differs: baseline {baseline.data.get(k)!r}, candidate {candidate.data.get(k)!r}"
            for k in watched
            if baseline.data.get(k) != candidate.data.get(k)
        ]
    else:
        results, notes = prune_drop_rules(baseline, candidate, rules)
        notes += [
            f"{task}: {k} differs: baseline {getattr(drop, k)!r}, candidate {getattr(candidate.tasks[task], k)!r}"
            for task, drop in baseline.tasks.items()
            if task in candidate.tasks
            for k in ("num_fewshot", "limit")
            if getattr(drop, k) != getattr(candidate.tasks[task], k)
        ]
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


def plot_verdict(verdict: Verdict, out_dir: str | Path | None = None) -> list[Path]:
    """Draw compare.png (compare_<kind>.png when several kinds) next to the candidate, or in `out_dir`."""
    from layerprobe.report import plot_compare_angular, plot_compare_prune_drop

    paths = []
    for comp in verdict.comparisons:
        directory = Path(out_dir) if out_dir is not None else comp.candidate.path.parent
        name = f"compare_{comp.kind}.png" if len(verdict.comparisons) > 1 else "compare.png"
        draw = plot_compare_angular if comp.kind == "angular" else plot_compare_prune_drop
        paths.append(draw(comp.baseline_result, comp.candidate_result, directory / name))
    return paths


# --- the command (registered in cli.py as `compare`) --------------------------------------------------


def compare_command(
    baseline: Annotated[Path, typer.Argument(help="Baseline result JSON, or a run directory.")],
    candidate: Annotated[Path, typer.Argument(help="Candidate result JSON of the same kind, or a run directory.")],
    rules_file: Annotated[
        Path | None, typer.Option("--rules", help="Rules TOML (sections angular, prune_drop); flags override it.")
    ] = None,
    lazy_threshold: Annotated[
        float | None, typer.Option(help="A block is lazy when d(x^l, x^l+1) is below this (default 0.2).")
    ] = None,
    max_lazy_increase: Annotated[int | None, typer.Option(help="Extra lazy blocks allowed (default 0).")] = None,
    adjacent_tolerance: Annotated[
        float | None, typer.Option(help="Allowed fall of the mean adjacent distance (default 0.02).")
    ] = None,
    max_drop: Annotated[
        float | None, typer.Option(help="Allowed worsening of a task's full-model score (absolute, default 0.01).")
    ] = None,
    se_factor: Annotated[
        float | None, typer.Option(help="A layer's ΔP may worsen by this × combined stderr (default 2.0).")
    ] = None,
    output_format: Annotated[str, typer.Option("--format", help="table|markdown|json on stdout.")] = "table",
    junit: Annotated[Path | None, typer.Option("--junit", help="Also write JUnit XML here.")] = None,
    plot: Annotated[
        bool, typer.Option("--plot/--no-plot", help="Draw compare.png (compare_<kind>.png for several kinds).")
    ] = True,
    out_dir: Annotated[
        Path | None, typer.Option("--out", help="Plot directory (default: next to the candidate result).")
    ] = None,
) -> None:
    """Gate a candidate's results against a baseline's: exit 0 pass, 1 regression, 2 bad input."""
    check_format(output_format)
    rules = load_rules(
        rules_file,
        lazy_threshold=lazy_threshold,
        max_lazy_increase=max_lazy_increase,
        adjacent_tolerance=adjacent_tolerance,
        max_drop=max_drop,
        se_factor=se_factor,
    )
    verdict = compare_paths(baseline, candidate, rules)
    if output_format == "table":
        Console().print(build_table(verdict))
    else:
        typer.echo(render(verdict, output_format), nl=False)
    err = Console(stderr=True)
    if junit is not None:
        try:
            junit.parent.mkdir(parents=True, exist_ok=True)
            junit.write_text(render_junit(verdict), encoding="utf-8")
        except OSError as exc:
            raise LayerprobeError(f"Cannot write --junit {junit}: {exc.strerror or exc}") from exc
        err.print(f"wrote {junit}", highlight=False, markup=False)
    if plot:
        try:
            for path in plot_verdict(verdict, out_dir):
                err.print(f"wrote {path}", highlight=False, markup=False)
        except (LayerprobeError, OSError) as exc:  # a plot is a courtesy: it must not change the exit status
            err.print(
                f"warning: no plot: {getattr(exc, 'message', exc)}", style="yellow", highlight=False, markup=False
            )
    if not verdict.passed:
        raise typer.Exit(1)


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
    for kind, name in KIND_FILES.items():
        here = [(baseline / name).is_file(), (candidate / name).is_file()]
        if all(here):
            pairs.append((baseline / name, candidate / name))
        elif any(here):
            role, path = ("baseline", baseline) if here[0] else ("candidate", candidate)
            skipped.append(f"{kind}: only in the {role} ({path / name}); skipped")
    if not pairs:
        raise ResultError(
            f"{baseline} and {candidate} share no result ({' or '.join(KIND_FILES.values())}).",
            hint="Run the same layerprobe commands for both checkpoints.",
        )
    return pairs, skipped


def _kind(result: Any) -> str:
    return "angular" if isinstance(result, AngularResult) else "prune_drop"


def _side(path: Path, result: AngularResult | PruneDropResult) -> Side:
    layers = result.num_layers if isinstance(result, AngularResult) else result.model.num_layers
    return Side(path, result.model.id, result.model.revision, result.model.commit, int(layers))
