"""Every field of every result kind, set to an impossible value in a real file, is refused by each command reading it.

The files are the real commands' output on tiny checkpoints (the review runs of conftest.py, plus `track`,
`stability`, `heal` and `gain` run here). Each case copies the file, puts one impossible value at one
JSON path (a negative count, an accuracy of 1.5, an interval that does not hold its estimate, a speed-up
of 0, a negative norm…) and runs the commands that read that kind: each must exit 2 with one error line
naming the field, never a traceback, and never use the value.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from command_line import invoke
from factories import edited

pytestmark = pytest.mark.slow

INF = float("inf")
NAN = float("nan")
ARC = "tasks.lp_arc_like.metrics.acc"
SET = "methods.angular.sets.1.scores.corpus"
KL = "held_out.metrics.kl"
RATIOS = "models.1.ratios"  # the JSON path edited
SHOWN = "models[1].ratios"  # as the error names it

# kind → (file name in the run directory, the commands that read it: "plot", "compare", "report", "track", "from")
KINDS = {
    "angular": ("angular.json", ("plot", "compare", "report", "track")),
    "prune_drop": ("prune_drop.json", ("plot", "compare", "report", "track")),
    "depth": ("depth.json", ("plot", "compare", "report", "track")),
    "prune_curve": ("prune_curve.json", ("plot", "report", "from")),
    "track": ("track.json", ("plot",)),
    "stability": ("stability.json", ("plot",)),
    "heal": ("heal.json", ("plot",)),
    "gain": ("gain.json", ("plot",)),
}

# (kind, JSON path, impossible value, what the error says)
CASES = [
    ("angular", "distance.1.2", -0.5, "distance[1][2] must be a number in [0, 1]"),
    ("angular", "distance_stderr.0.1", -0.01, "distance_stderr[0][1] must be a number ≥ 0"),
    ("angular", "tokens_per_second", -INF, "tokens_per_second must be a number ≥ 0"),
    ("angular", "nonfinite_tokens", -1, "nonfinite_tokens must be an integer ≥ 0"),
    ("angular", "data.tokens", 2.5, "data.tokens must be an integer ≥ 1"),
    ("prune_drop", f"{ARC}.baseline", 1.5, f"{ARC}.baseline must be a number in [0, 1]"),
    ("prune_drop", f"{ARC}.pruned", [0.3, -0.1, 0.3, 0.3], f"{ARC}.pruned[1] must be a number in [0, 1]"),
    ("prune_drop", f"{ARC}.baseline_stderr", -0.2, f"{ARC}.baseline_stderr must be a number ≥ 0"),
    ("prune_drop", f"{ARC}.delta_ci95.0", [0.5, 0.9], f"{ARC}.delta_ci95[0] must be an interval holding its estimate"),
    ("prune_drop", f"{ARC}.p_value", [1.0, 1.0, 2.0, 1.0], f"{ARC}.p_value[2] must be"),
    ("prune_drop", "tasks.lp_arc_like.samples", -8, "tasks.lp_arc_like.samples must be an integer ≥ 0"),
    ("depth", "residual.rms.mean.0", -1.0, "residual.rms.mean[0] must be a number ≥ 0"),
    ("depth", "update.relative.mean.1", 1e9, "update.relative.mean must be means within [min, max]"),
    ("depth", "residual.variance.count.0", -3, "residual.variance.count[0] must be an integer ≥ 0"),
    ("depth", "grad.block.0", -0.5, "grad.block[0] must be a number ≥ 0"),
    ("depth", "grad.mean_loss", -2.0, "grad.mean_loss must be a number ≥ 0"),
    ("prune_curve", f"{SET}.top1_agreement.value", 1.2, f"{SET}.top1_agreement.value must be a number in [0, 1]"),
    ("prune_curve", f"{SET}.kl.value", -0.1, f"{SET}.kl.value must be a number ≥ 0"),
    ("prune_curve", f"{SET}.nll.ci95", [0.0, 0.1], f"{SET}.nll.ci95 must be an interval holding its estimate"),
    ("prune_curve", f"{SET}.nll.delta_ci95", [5.0, 6.0], f"{SET}.nll.delta_ci95 must be an interval holding"),
    ("prune_curve", "baseline.corpus.nll.stderr", -1.0, "baseline.corpus.nll.stderr must be a number ≥ 0"),
    ("track", "runs.0.angular.lazy_count", 99, "runs[0].angular.lazy_count must be a count of at most 4 blocks"),
    ("track", "runs.0.angular.mean_adjacent_ci95", [0.8, 0.9], "mean_adjacent_ci95 must be an interval holding"),
    ("track", "runs.0.angular.adjacent_stderr.0", -0.1, "runs[0].angular.adjacent_stderr[0] must be a number ≥ 0"),
    ("track", "runs.0.depth.rms_growth", -2.0, "runs[0].depth.rms_growth must be a number ≥ 0"),
    (
        "stability",
        "pairs.0.kendall_tau_b_ci95",
        [-1.0, -0.99],
        "pairs[0].kendall_tau_b_ci95 must be an interval holding",
    ),
    ("stability", "pairs.0.jaccard_lowest_k.0", 1.5, "pairs[0].jaccard_lowest_k[0] must be a number in [0, 1]"),
    ("heal", f"{KL}.pruned.value", -0.5, f"{KL}.pruned.value must be a number ≥ 0"),
    (
        "heal",
        "held_out.metrics.top1_agreement.healed.value",
        1.5,
        "top1_agreement.healed.value must be a number in [0, 1]",
    ),
    ("heal", f"{KL}.healed.ci95", [50.0, 60.0], f"{KL}.healed.ci95 must be an interval holding its estimate"),
    ("heal", f"{KL}.pruned_delta.stderr", -1.0, f"{KL}.pruned_delta.stderr must be a number ≥ 0"),
    ("heal", "fit_seconds", -1.0, "fit_seconds must be a number ≥ 0"),
    ("heal", "parameters.original", -5, "parameters.original must be an integer ≥ 0"),
    ("gain", "models.1.parameters", 0, "models[1].parameters must be an integer ≥ 1"),
    ("gain", f"{RATIOS}.parameters", 0.0, f"{SHOWN}.parameters must be a finite number > 0"),
    ("gain", f"{RATIOS}.bytes_on_disk", INF, f"{SHOWN}.bytes_on_disk must be a finite number"),
    ("gain", f"{RATIOS}.decode_tokens_per_second.median", -1.0, "decode_tokens_per_second.median must be a number ≥ 0"),
    ("gain", f"{RATIOS}.prefill_tokens_per_second.spread", [5.0, 6.0], "prefill_tokens_per_second.spread must be"),
    ("gain", "models.0.prefill_tokens_per_second.0", NAN, "models[0].prefill_tokens_per_second[0] must be a finite"),
]


@pytest.fixture(scope="module")
def real_files(review_runs, stability_runs, tmp_path_factory) -> dict[str, Path]:
    """One real file of each kind, by kind (angular … prune_curve in the run directory of step 3000)."""
    root = tmp_path_factory.mktemp("impossible")
    run = review_runs.by_step[3000]
    files = {kind: run / name for kind, (name, _) in KINDS.items() if (run / name).is_file()}
    track = invoke("track", *review_runs.scrambled, "--out", root / "track", "-q")
    assert track.exit_code == 0, track.output
    files["track"] = root / "track" / "track.json"
    stable = invoke("stability", stability_runs["pydoc"], stability_runs["notes"], "--draws", 20, "--out", root / "st")
    assert stable.exit_code == 0, stable.output
    files["stability"] = root / "st" / "stability.json"
    checkpoint = review_runs.root / "run" / "checkpoint-3000"
    heal = invoke(
        "heal", checkpoint, "--remove", "1", "--dataset", "builtin:pydoc", "--tokens", 256, "--held-out-tokens", 256,
        "--seq-len", 32, "--device", "cpu", "--save", root / "healed", "--out", root / "heal", "-q",
    )  # fmt: skip
    assert heal.exit_code == 0, heal.output
    files["heal"] = root / "heal" / "heal.json"
    gain = invoke(
        "gain", checkpoint, root / "healed", "--device", "cpu", "--prompt-tokens", 8, "--new-tokens", 2,
        "--repeats", 2, "--out", root / "gain", "-q",
    )  # fmt: skip
    assert gain.exit_code == 0, gain.output
    files["gain"] = root / "gain" / "gain.json"
    assert set(files) == set(KINDS)
    return files


def reads(command: str, kind: str, path: str) -> bool:
    """Whether `command` reads the field at `path`: `prune --from` reads the model and the chosen set only."""
    return not (command == "from" and (path.startswith("baseline.") or ".scores." in path))


def _commands(kind: str, bad: Path, review_runs, out: Path, path: str) -> list[list[object]]:
    other = review_runs.by_step[1000]
    shapes = {
        "plot": ["plot", bad, "--out", out / "plot"],
        "compare": ["compare", bad, bad],
        "report": ["report", bad.parent, "--out", out / "report.html", "-q"],
        "track": ["track", bad.parent, other, "--out", out / "track", "-q"],
        "from": [
            "prune",
            review_runs.root / "run" / "checkpoint-3000",
            "--from",
            bad,
            "--method",
            "angular",
            "--n",
            1,
            "--save",
            out / "pruned",
        ],
    }
    return [shapes[name] for name in KINDS[kind][1] if reads(name, kind, path)]


@pytest.mark.parametrize(("kind", "path", "value", "message"), CASES, ids=[f"{c[0]}:{c[1]}" for c in CASES])
def test_an_impossible_field_is_refused_by_every_command_that_reads_it(
    real_files, review_runs, tmp_path, kind, path, value, message
):
    source = real_files[kind]
    run = tmp_path / "run"
    if kind in ("angular", "prune_drop", "depth", "prune_curve"):  # a run directory: copied whole (report reads it)
        shutil.copytree(source.parent, run)
    else:
        run.mkdir()
    bad = run / source.name
    bad.write_text(json.dumps(edited(json.loads(source.read_text()), path, value)))
    for command in _commands(kind, bad, review_runs, tmp_path / "out", path):
        result = invoke(*command)
        shown = " ".join(result.stderr.split())
        assert result.exit_code == 2, (command[0], result.output)
        assert "Traceback" not in result.output and message in shown, (command[0], shown)
        assert result.stderr.startswith("error:") and result.stderr.count("error:") == 1, result.stderr
    assert not (tmp_path / "out" / "pruned").exists()
