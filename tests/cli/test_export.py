"""`layerprobe prune`: writes the pruned checkpoint, refuses an occupied destination or zeroed sublayers."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys

import pytest
import torch
from command_line import assert_one_line_error, invoke
from factories import curve_dict, curve_sets_dict
from safetensors import safe_open
from typer.testing import CliRunner

from layerprobe.cli.app import app
from layerprobe.results import ExportPlaces, RunDir


def test_cli_prune(export_sources, tmp_path):
    runner = CliRunner()
    out, merge = tmp_path / "out", tmp_path / "merge.yaml"
    result = runner.invoke(
        app,
        [
            "prune",
            str(export_sources("llama")),
            "--remove",
            "4-5",
            "--save",
            str(out),
            "--mergekit-yaml",
            str(merge),
            "-q",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "6 → 4 blocks" in result.output and (out / "model.safetensors").is_file() and merge.is_file()
    again = runner.invoke(app, ["prune", str(export_sources("llama")), "--remove", "1", "--save", str(out), "-q"])
    assert again.exit_code == 2 and "--overwrite" in again.output
    refused = runner.invoke(
        app, ["prune", str(export_sources("llama")), "--remove-mlp", "1", "--save", str(tmp_path / "x")]
    )
    assert refused.exit_code == 2 and "zeroed weights" in refused.output


def test_cli_prune_help_lists_every_option():
    result = CliRunner().invoke(app, ["prune", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    for option in (
        "--remove",
        "--remove-attention",
        "--remove-mlp",
        "--save",
        "--overwrite",
        "--mergekit-yaml",
        "--max-shard-size",
        "--revision",
        "--dtype",
        "--trust-remote-code",
        "--layers-path",
        "--quiet",
        "--from",
        "--method",
        "--n",
    ):
        assert option in result.output


# Runs `layerprobe prune` and stops it at a point of the replacement, where the test kills it with SIGKILL.
PAUSING_PRUNE = """
import os, sys, time
from pathlib import Path
import layerprobe.export.place as place
from layerprobe.cli.app import app

point, destination = sys.argv[1], Path(sys.argv[2]).absolute()
real_replace, real_sync = os.replace, place.sync_tree

def pause():
    print("paused", flush=True)
    time.sleep(600)

def sync(directory):
    real_sync(directory)
    if point == "written":
        pause()

def replace(source, target):
    if (point == "between" and Path(target) == destination) or (point == "trash" and "-trash-" in str(target)):
        pause()
    return real_replace(source, target)

place.sync_tree, os.replace = sync, replace
place.exchange = lambda a, b: False  # the two-rename path these kill points stop in (the exchange: tests/export)
sys.argv = ["layerprobe", *sys.argv[3:]]
app()
"""


def _environment():
    return {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "COLUMNS": "250"}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("point", "note", "removed"),
    [
        ("written", "left by an export that was killed", [1]),
        ("between", "restored", [1]),
        ("trash", "the checkpoint an earlier export had replaced", [1, 2]),
    ],
)
def test_prune_killed_while_replacing_save_is_recovered_by_the_next_run(export_sources, tmp_path, point, note, removed):
    source, out = str(export_sources("llama")), tmp_path / "out"
    assert CliRunner().invoke(app, ["prune", source, "--remove", "1", "--save", str(out), "-q"]).exit_code == 0
    args = ["prune", source, "--remove", "1-2", "--save", str(out), "--overwrite", "-q"]
    child = subprocess.Popen(
        [sys.executable, "-c", PAUSING_PRUNE, point, str(out), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_environment(),
    )
    try:
        assert child.stdout.readline().strip() == "paused", child.stderr.read()
    finally:
        child.kill()  # SIGKILL: no handler, no finally runs in the child
        child.communicate()
    whole = out if out.exists() else ExportPlaces(out).backup
    assert json.loads(RunDir(whole).export_record.read_text())["removed_blocks"] == removed
    result = CliRunner().invoke(app, ["prune", source, "--remove", "3", "--save", str(out), "--overwrite", "-q"])
    assert result.exit_code == 0, result.output
    notes = [line for line in result.output.splitlines() if line.startswith("note:")]
    assert any(note in line for line in notes), result.output
    assert json.loads(RunDir(out).export_record.read_text())["removed_blocks"] == [3]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def _file_size_limit(limit: int):
    def apply():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # write() then fails with EFBIG instead of killing
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


@pytest.mark.slow
def test_prune_under_a_file_size_limit_is_one_line(export_sources, tmp_path):
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "layerprobe", "prune", str(export_sources("llama")), "--remove", "1"]
        + ["--save", str(out), "-q"],
        capture_output=True,
        text=True,
        env=_environment(),
        preexec_fn=_file_size_limit(60_000),
        timeout=300,
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith("error: ") and "file too large" in lines[0], done.stderr
    assert "needs about" in lines[0] and "--max-shard-size" in lines[1] and "Traceback" not in done.stderr
    assert list(tmp_path.iterdir()) == []


def _curve(tmp_path, data, name="prune_curve.json"):
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def _tensors(directory):
    with safe_open(directory / "model.safetensors", "pt") as handle:
        return {key: handle.get_tensor(key) for key in handle.keys()}


def test_cli_prune_from_a_curve_exports_that_methods_set(export_sources, tmp_path):
    source = str(export_sources("llama"))
    sets = {"greedy": {2: {"blocks": [4, 1], "sublayers": []}}, "angular": {2: {"blocks": [2, 3]}}}
    curve = _curve(tmp_path, curve_sets_dict(sets, num_layers=6, model_id=source))
    merge = tmp_path / "merge.yaml"
    args = ["--from", curve, "--method", "greedy", "--n", 2, "--save", tmp_path / "chosen", "--mergekit-yaml", merge]
    result = invoke("prune", source, *args, "-q")
    assert result.exit_code == 0, result.output
    assert "6 → 4 blocks (removed 1, 4)" in result.output
    record = json.loads(RunDir(tmp_path / "chosen").export_record.read_text())
    assert record["removed_blocks"] == [1, 4] and record["kept_blocks"] == [0, 2, 3, 5]
    assert record["chosen_set"] == {"from": str(curve), "method": "greedy", "n": 2}
    assert "--remove 1,4" in merge.read_text()
    by_hand = invoke("prune", source, "--remove", "1,4", "--save", tmp_path / "by-hand", "-q")
    assert by_hand.exit_code == 0, by_hand.output
    chosen, expected = _tensors(tmp_path / "chosen"), _tensors(tmp_path / "by-hand")
    assert chosen.keys() == expected.keys() and all(torch.equal(chosen[k], expected[k]) for k in chosen)


def test_cli_prune_from_an_older_curve_takes_the_span(export_sources, tmp_path):
    data = curve_dict()  # 4 blocks; angular chose the span [1, 3) for n = 2
    curve = _curve(tmp_path, {**data, "model": {**data["model"], "architecture": "GPT2LMHeadModel"}})
    out = tmp_path / "out"
    result = invoke("prune", export_sources("gpt2"), "--from", curve, "--method", "angular", "--n", 2, "--save", out)
    assert result.exit_code == 0, result.output
    assert json.loads(RunDir(out).export_record.read_text())["removed_blocks"] == [1, 2]
    assert "measured on org/m" in result.output  # the curve names another model id: said, not refused


def test_cli_prune_refuses_a_curve_of_another_architecture(export_sources, tmp_path, monkeypatch):
    curve = _curve(tmp_path, curve_dict())  # a LlamaForCausalLM's curve of 4 blocks, like the tiny GPT-2's
    monkeypatch.setattr("layerprobe.export.save._load_weights", _no_loading)
    out = tmp_path / "out"
    result = invoke("prune", export_sources("gpt2"), "--from", curve, "--method", "angular", "--n", 2, "--save", out)
    assert_one_line_error(result, "was measured on a LlamaForCausalLM", out)
    assert not out.exists()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--method", "blockpruner", "--n", "2"], "cannot express removing the attention of block 3 alone"),
        (["--method", "sleb", "--n", "2"], "has no method 'sleb'; it has: greedy, blockpruner"),
        (["--method", "greedy", "--n", "3"], "has no greedy set for n = 3; it has: n = 2."),
        (["--method", "greedy"], "--from needs --method and --n"),
        (["--method", "greedy", "--n", "2", "--remove", "1"], "--from and --remove both say what to remove"),
    ],
)
def test_cli_prune_from_refusals_come_before_loading(export_sources, tmp_path, monkeypatch, options, message):
    sets = {
        "greedy": {2: {"blocks": [1, 4]}},
        "blockpruner": {2: {"blocks": [], "sublayers": [[3, "attention"], [5, "mlp"]]}},
    }
    curve = _curve(tmp_path, curve_sets_dict(sets, num_layers=6))
    monkeypatch.setattr("layerprobe.export.save._load_weights", _no_loading)
    out = tmp_path / "out"
    result = invoke("prune", export_sources("llama"), "--from", curve, *options, "--save", out)
    assert_one_line_error(result, message, out)
    assert not out.exists()


def test_cli_prune_refuses_a_curve_of_another_block_count(export_sources, tmp_path, monkeypatch):
    curve = _curve(tmp_path, curve_sets_dict({"greedy": {1: {"blocks": [1]}}}, num_layers=8))
    monkeypatch.setattr("layerprobe.export.save._load_weights", _no_loading)
    result = invoke(
        "prune", export_sources("llama"), "--from", curve, "--method", "greedy", "--n", 1, "--save", tmp_path / "x"
    )
    assert_one_line_error(result, "was measured on a model of 8 blocks", tmp_path)
    result = invoke("prune", export_sources("llama"), "--method", "greedy", "--n", 1, "--save", tmp_path / "x")
    assert_one_line_error(result, "--method and --n choose a set from a prune_curve.json", tmp_path)


def _no_loading(*_args, **_kwargs):
    raise AssertionError("weights were loaded before the refusal")
