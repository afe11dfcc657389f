"""Which runs belong together and in what order: step spellings, sibling checkpoints, hub ids."""

from __future__ import annotations

import json
import shutil

import pytest
from typer.testing import CliRunner

from layerprobe.cli.app import app
from layerprobe.results import ModelInfo
from layerprobe.review.order import parse_step, run_step, sibling_checkpoints


@pytest.mark.parametrize(
    ("text", "step"),
    [
        ("step-1000", 1000),
        ("step_2000", 2000),
        ("step3000", 3000),
        ("STEP-4000", 4000),
        ("checkpoint-5000", 5000),
        ("ckpt-6000", 6000),
        ("iter-7000", 7000),
        ("Iter_8000", 8000),
        ("global_step9000", 9000),
        ("refs/pr/step-10", 10),
        ("main", None),
        ("v1.0", None),
        ("bestep-5", None),  # a word that ends in "step" is not a step
        (None, None),
    ],
)
def test_step_spellings(text, step):
    assert parse_step(text) == step


def model(model_id: str, revision: str | None = None, path: str | None = None) -> ModelInfo:
    return ModelInfo(
        model_id,
        revision,
        None,
        "LlamaForCausalLM",
        "llama",
        "causal-lm",
        "float32",
        4,
        "model.layers",
        "LlamaDecoderLayer",
        path,
    )


def test_the_revision_wins_over_the_directory_name():
    assert (run_step(model("EleutherAI/pythia-160m", "step143000")).value, run_step(model("x", "step-5")).source) == (
        143000,
        "revision",
    )
    assert run_step(model("/runs/a/checkpoint-300", "main")).value == 300
    assert run_step(model("/runs/a/checkpoint-300/", None)).source == "directory"  # a trailing slash is the same folder
    assert run_step(model("demo", None, path="/x/ckpt-12")).value == 12  # the path a display name stands for
    assert run_step(model("org/model", "main")).value is None


def test_siblings_share_a_parent_and_each_carries_a_step():
    assert sibling_checkpoints([model("/r/run/checkpoint-1000"), model("/r/run/checkpoint-2000")])
    assert not sibling_checkpoints([model("/r/run/checkpoint-1000"), model("/r/other/checkpoint-2000")])
    # Two hub models of one organisation are not checkpoints of one run.
    assert not sibling_checkpoints([model("meta-llama/Llama-2-7b-hf"), model("meta-llama/Llama-2-13b-hf")])


def test_hub_revisions_of_one_model_are_ordered_by_their_step(review_runs, tmp_path):
    """Runs of one hub id at revisions step-N (as a Pythia-style series records them), given out of order."""
    dirs = []
    for revision, source in (("step-3000", 1000), ("step_1000", 2000), ("main", 3000)):
        target = tmp_path / revision
        shutil.copytree(review_runs.by_step[source], target)
        for name in ("angular.json", "prune_drop.json", "depth.json", "prune_curve.json"):
            data = json.loads((target / name).read_text())
            data["model"] |= {"id": "org/model", "revision": revision, "commit": f"{revision}-sha"}
            (target / name).write_text(json.dumps(data))
        dirs.append(target)
    args = ["track", *map(str, dirs[:2]), "--out", str(tmp_path / "t"), "--format", "json", "-q", "--no-plot"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    runs = json.loads(result.stdout)["runs"]
    assert [(r["revision"], r["step"], r["step_from"], r["commit"]) for r in runs] == [
        ("step_1000", 1000, "revision", "step_1000-sha"),
        ("step-3000", 3000, "revision", "step-3000-sha"),
    ]
    with_main = CliRunner().invoke(
        app, ["track", *map(str, dirs), "--out", str(tmp_path / "t"), "--format", "json", "-q", "--no-plot"]
    )
    data = json.loads(with_main.stdout)
    assert data["order"] == "given" and [r["revision"] for r in data["runs"]] == ["step-3000", "step_1000", "main"]
    assert data["notes"] == ["kept the given order: no training step in the revision or checkpoint of main"]
    assert [r["label"] for r in data["runs"]] == ["step 3000", "step 1000", "main"]


def test_a_directory_with_two_checkpoints_results_is_refused(review_runs, tmp_path):
    target = tmp_path / "mixed"
    shutil.copytree(review_runs.by_step[1000], target)
    shutil.copy(review_runs.by_step[2000] / "depth.json", target / "depth.json")
    result = CliRunner().invoke(app, ["track", str(target), "--out", str(tmp_path / "t")])
    assert result.exit_code == 2 and "holds results of different checkpoints" in result.output
    assert "depth.json: " in result.output and "checkpoint-2000" in result.output
