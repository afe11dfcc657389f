"""Real run directories for `track` and `report`, made once per session by the real commands.

Three tiny LLaMA checkpoints of one training run (`run/checkpoint-1000` … `checkpoint-3000`, seeds 0-2),
each measured by `angular` (per-block stderrs), `prune-drop` on a local lm-eval task, `depth --grad` and
`prune-curve --task corpus`, into run directories named without their step (`x`, `y`, `z`, given out of
order). Two more checkpoints are measured by `angular` only: a 6-block sibling (`checkpoint-4000`, for
`--align relative`) and a model of another training run (for `--allow-mixed`). Under xdist the workers
share one build (a file lock), so the commands run once per session.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
from factories import build_checkpoint
from factories.stability import BLOCKS, TEXT, angular_run, corpus_drop_run
from filelock import FileLock
from typer.testing import CliRunner

TASKS_DIR = Path(__file__).resolve().parents[1] / "data" / "tasks"
CORPUS = ["--dataset", "builtin:pydoc", "--seq-len", "32", "--device", "cpu", "-q"]
STEPS = (1000, 2000, 3000)
RUN_NAMES = {3000: "x", 1000: "y", 2000: "z"}  # run directory → step: the names say nothing of the order


@dataclass(frozen=True)
class ReviewRuns:
    """The run directories (by step), in the scrambled order a user might pass them, and the extras."""

    root: Path
    by_step: dict[int, Path]
    deep: Path  # 6 blocks, sibling checkpoint-4000: angular only
    other: Path  # another model (not a sibling): angular only

    @property
    def scrambled(self) -> list[Path]:
        return [self.by_step[3000], self.by_step[1000], self.by_step[2000]]

    def raw(self, step: int, kind: str) -> dict:
        """The JSON a command wrote, as plain data (the tests' independent source of every number)."""
        name = {"angular": "angular.json", "prune_drop": "prune_drop.json", "depth": "depth.json"}.get(kind, kind)
        return json.loads((self.by_step[step] / name).read_text())


def invoke(args: list[str]) -> None:
    from layerprobe.cli.app import app

    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output


def measure(checkpoint: Path, out: Path, *, full: bool) -> None:
    invoke(["angular", str(checkpoint), "--tokens", "256", *CORPUS, "--out", str(out)])
    if not full:
        return
    invoke(["depth", str(checkpoint), "--tokens", "96", "--grad", *CORPUS, "--out", str(out)])
    task = ["--task", "lp_arc_like", "--include-path", str(TASKS_DIR), "--limit", "8", "--batch-size", "8"]
    invoke(["prune-drop", str(checkpoint), *task, "--device", "cpu", "-q", "--out", str(out)])
    curve = ["--task", "corpus", "--tokens", "128", "--angular", str(out / "angular.json"), "--max-fraction", "0.5"]
    invoke(["prune-curve", str(checkpoint), *curve, *CORPUS, "--out", str(out)])


def build_runs(root: Path) -> ReviewRuns:
    training = root / "run"
    by_step = {}
    for seed, step in enumerate(STEPS):
        checkpoint = build_checkpoint("llama", training / f"checkpoint-{step}", num_layers=4, seed=seed)
        by_step[step] = root / "runs" / RUN_NAMES[step]
        measure(checkpoint, by_step[step], full=True)
    deep = build_checkpoint("llama", training / "checkpoint-4000", num_layers=6, seed=3)
    measure(deep, root / "runs" / "deep", full=False)
    other = build_checkpoint("llama", root / "elsewhere" / "model-b", num_layers=4, seed=4)
    measure(other, root / "runs" / "other", full=False)
    return ReviewRuns(root, by_step, root / "runs" / "deep", root / "runs" / "other")


# Building the review runs takes about 40 s of one core (and holds the other xdist worker at the lock), so
# every test that uses them runs in the slow tier: the default run stays under 3 minutes on 2 cores.
RUN_BUILDING_FIXTURES = {"review_runs", "report_pages"}


@pytest.hookimpl(tryfirst=True)  # before `-m "not slow"` deselects by marker
def pytest_collection_modifyitems(items) -> None:
    for item in items:
        browser = item.get_closest_marker("browser") is not None  # its own step already
        if not browser and RUN_BUILDING_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def review_runs(tmp_path_factory, worker_id) -> ReviewRuns:
    """The run directories, built once per session (shared by xdist workers)."""
    base = tmp_path_factory.getbasetemp()
    root = (base if worker_id == "master" else base.parent) / "review-runs"
    with FileLock(str(root) + ".lock"):
        done = root / "done"
        if not done.exists():
            build_runs(root)
            done.write_text("ok")
    return ReviewRuns(
        root, {step: root / "runs" / RUN_NAMES[step] for step in STEPS}, root / "runs" / "deep", root / "runs" / "other"
    )


@dataclass(frozen=True)
class ReportPages:
    one: Path  # the page of step 3000 alone
    several: Path  # the page of all three runs, given out of order (report.html in a directory)
    stdout: str  # what `report` printed for `several`


@pytest.fixture(scope="session")
def report_pages(review_runs, tmp_path_factory) -> ReportPages:
    """`layerprobe report` of one run and of the three, once per session (per worker)."""
    from layerprobe.cli.app import app

    out = tmp_path_factory.mktemp("report")
    one = CliRunner().invoke(app, ["report", str(review_runs.by_step[3000]), "--out", str(out / "one.html"), "-q"])
    assert one.exit_code == 0, one.output
    several = CliRunner().invoke(app, ["report", *map(str, review_runs.scrambled), "--out", str(out), "-q"])
    assert several.exit_code == 0, several.output
    return ReportPages(out / "one.html", out / "report.html", several.stdout)


# --- `layerprobe stability`: several results of one model (and of others it must refuse) ---------
# `layerprobe stability`'s fixtures, built once per session: tiny checkpoints and the result files it reads.
#
# Runs go through the library calls the commands use (`run_angular`, `run_prune_drop`) on tiny random
# models, written where the commands would write them, so `layerprobe stability` reads real files:
#
# - `llama`: a 6-block LLaMA; `llama_copy`: the same files under another path; `llama_other`: the same
#   architecture with other weights; `llama_deep`: 8 blocks; `gpt2`: another architecture (6 blocks).
# - `stability_runs`: angular.json on two corpora (builtin:pydoc, a local text file) and with `--positions last`;
#   prune_drop.json of `--task corpus` with its `samples/` (per-document values) and without them.


@pytest.fixture(scope="session")
def stability_models(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("stability-checkpoints")
    built = {
        "llama": build_checkpoint("llama", root / "llama", num_layers=BLOCKS),
        "llama_other": build_checkpoint("llama", root / "llama_other", num_layers=BLOCKS, seed=1),
        "llama_deep": build_checkpoint("llama", root / "llama_deep", num_layers=BLOCKS + 2),
        "gpt2": build_checkpoint("gpt2", root / "gpt2", num_layers=BLOCKS),
    }
    built["llama_copy"] = Path(shutil.copytree(built["llama"], root / "copy" / "llama"))
    return built


@pytest.fixture(scope="session")
def stability_text(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("stability-corpus") / "notes.txt"
    path.write_text(TEXT * 60, encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def stability_runs(stability_models, stability_text, tmp_path_factory) -> dict[str, Path]:
    """Result files of the 6-block LLaMA, by name (each in its own run directory, named like the key)."""
    root = tmp_path_factory.mktemp("stability-runs")
    model = stability_models["llama"]
    return {
        "pydoc": angular_run(model, root / "pydoc"),
        "notes": angular_run(model, root / "notes", str(stability_text)),
        "last": angular_run(model, root / "last", positions="last"),
        "corpus": corpus_drop_run(model, root / "corpus"),
        "nosamples": corpus_drop_run(model, root / "nosamples", log_samples=False),
    }
