"""What `compare` is given: a baseline's and a candidate's results, as files, run directories or verdicts.

The numbers are picked by hand so that each rule of the gate can pass or fail on its own.
"""

from __future__ import annotations

from pathlib import Path

from factories.results import angular_from_adjacent, metric_drop, prune_drop_result
from layerprobe.gate import GateRules
from layerprobe.gate.verdict import Verdict
from layerprobe.results import PruneDropResult, write_json

GATE_ADJACENT = [0.5, 0.4, 0.3, 0.1]  # 1 lazy block (3), mean 0.325
GATE_PRUNED = [0.20, 0.60, 0.68, 0.69]  # ΔP = -0.5, -0.1, -0.02, -0.01


def gate_baseline_prune(**kw) -> PruneDropResult:
    """The baseline prune-drop result of the gate tests: arc_easy's acc and acc_norm over 4 blocks."""
    return prune_drop_result(
        {"arc_easy": {"acc": metric_drop(0.70, GATE_PRUNED), "acc_norm": metric_drop(0.72, [0.3, 0.6, 0.7, 0.7])}},
        **kw,
    )


def write_result(root: Path, name: str, result) -> Path:
    """`result` written as JSON at root/name."""
    return write_json(root / name, result.to_dict())


def write_run_dirs(root: Path, base: dict, cand: dict) -> tuple[Path, Path]:
    """Two run directories, root/base and root/cand, holding {file name: result} each."""
    for side, results in (("base", base), ("cand", cand)):
        for file_name, result in results.items():
            write_json(root / side / file_name, result.to_dict())
    return root / "base", root / "cand"


def mixed_verdict_dirs(root: Path) -> tuple[Path, Path]:
    """Run directories where angular passes and prune-drop fails its layer rule at layer 2."""
    pruned = list(GATE_PRUNED)
    pruned[2] -= 0.1
    cand_prune = prune_drop_result({"arc_easy": {"acc": metric_drop(0.70, pruned)}}, model_id="org/cand")
    return write_run_dirs(
        root,
        {"angular.json": angular_from_adjacent(GATE_ADJACENT), "prune_drop.json": gate_baseline_prune()},
        {"angular.json": angular_from_adjacent(GATE_ADJACENT, "org/cand"), "prune_drop.json": cand_prune},
    )


def bad_compare_inputs(root: Path) -> dict[str, tuple[Path, Path]]:
    """(baseline, candidate) pairs `compare` must refuse, by what is wrong with them."""
    good = write_result(root, "good/angular.json", angular_from_adjacent(GATE_ADJACENT))
    other = write_result(root, "other/prune_drop.json", gate_baseline_prune())
    (root / "broken.json").write_text("{not json")
    future = angular_from_adjacent(GATE_ADJACENT).to_dict() | {"schema": "layerprobe/angular@9"}
    no_task = prune_drop_result({"mmlu": {"acc": metric_drop(0.3, [0.3] * 4)}})
    ragged = angular_from_adjacent(GATE_ADJACENT).to_dict()
    ragged["distance"][1] = ragged["distance"][1][:-1]
    (root / "empty").mkdir()
    return {
        "missing file": (good, root / "missing.json"),
        "missing baseline dir": (root / "nowhere", root / "good"),
        "kinds differ": (good, other),
        "file and directory": (good, root / "good"),
        "unreadable json": (good, root / "broken.json"),
        "schema version": (good, write_json(root / "future.json", future)),
        "no common task": (other, write_result(root, "no_task.json", no_task)),
        "ragged matrix": (good, write_json(root / "ragged.json", ragged)),
        "no common kind": (root / "good", root / "other"),
        "empty dir": (root / "good", root / "empty"),
    }


def verdict_of(*comparisons) -> Verdict:
    """The verdict holding these kind comparisons (paths b and c, default rules, nothing skipped)."""
    return Verdict(Path("b"), Path("c"), GateRules(), list(comparisons), [])
