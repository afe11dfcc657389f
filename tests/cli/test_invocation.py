"""`--config RUN.yaml` on every command, the command line each result records, and `layerprobe rerun`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import typer.main
from command_line import invoke

from layerprobe.cli.app import app
from layerprobe.cli.rerun import command_to_rerun
from layerprobe.core import content_digest, input_digests
from layerprobe.results import differences

TASKS = Path(__file__).resolve().parents[1] / "data" / "tasks"


def angular_args(model: Path, out: Path) -> list[str]:
    return [
        "angular",
        str(model),
        "--dataset",
        "builtin:pydoc",
        "--tokens",
        "256",
        "--seq-len",
        "128",
        "--out",
        str(out),
    ]


def write_yaml(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


# --- --config -----------------------------------------------------------------------------------------------
def test_every_command_takes_config():
    commands = typer.main.get_command(app).commands
    missing = [name for name, command in commands.items() if not any("--config" in p.opts for p in command.params)]
    assert not missing


def test_config_values_are_used_and_the_command_line_overrides_them(tiny_checkpoints, tmp_path):
    config = write_yaml(
        tmp_path / "run.yaml",
        f"model: {tiny_checkpoints['llama']}\ndataset: builtin:pydoc\ntokens: 512\nseq-len: 128\nquiet: true\n",
    )
    out = tmp_path / "out"
    result = invoke("angular", "--config", config, "--tokens", "256", "--out", out)
    assert result.exit_code == 0, result.output
    data = json.loads((out / "angular.json").read_text())
    assert data["data"]["tokens"] == 256  # the command line wins
    assert data["data"]["seq_len"] == 128  # `seq-len` from the file
    # The recorded command is what ran, without the YAML it came from: model, then every non-default option.
    command = data["run"]["command"]
    assert command[:2] == ["angular", str(tiny_checkpoints["llama"])]
    assert "--config" not in command
    assert command[command.index("--tokens") + 1] == "256" and command[command.index("--seq-len") + 1] == "128"
    assert command[command.index("--out") + 1] == str(out) and "--quiet" in command
    assert data["run"]["cwd"] == os.getcwd()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("tokenz: 3\n", "unknown option 'tokenz' for `angular`"),
        ("- a\n- b\n", "must be a mapping of option names to values"),
        ("tokens: [1, 2]\n", "tokens takes one value, got a list"),
        ("tokens: {a: 1}\n", "tokens must be a value or a list, not a mapping"),
        ("tokens: [\n", "is not valid YAML"),
        ("seq_len: 1\nseq-len: 2\n", "is given twice"),
        ("seq_len: true\n", "seq_len takes a value, not true"),  # YAML's true read as 1 by click: seq_len 1
        ("dataset: false\n", "dataset takes a value, not false"),
    ],
)
def test_a_bad_config_is_one_line_and_exit_2(tiny_checkpoints, tmp_path, text, message):
    config = write_yaml(tmp_path / "run.yaml", text)
    result = invoke("angular", tiny_checkpoints["llama"], "--config", config, "--out", tmp_path / "out")
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert lines[0].startswith("error: ") and message in lines[0], result.output
    assert len(lines) == 2 and lines[1].startswith("hint: ")
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_the_config_hint_works(tiny_checkpoints, tmp_path):
    """The hint says both spellings are accepted: `seq_len` and `seq-len` read the same."""
    for key in ("seq_len", "seq-len", "--seq-len"):
        config = write_yaml(tmp_path / "run.yaml", f"{key}: 64\ndataset: builtin:pydoc\ntokens: 128\n")
        out = tmp_path / key
        result = invoke("angular", tiny_checkpoints["llama"], "--config", config, "--out", out, "--quiet")
        assert result.exit_code == 0, result.output
        assert json.loads((out / "angular.json").read_text())["data"]["seq_len"] == 64


def test_a_config_list_is_an_option_given_several_times(tmp_path):
    from layerprobe.cli.invocation import read_config

    prune_drop = typer.main.get_command(app).commands["prune-drop"]
    values = read_config(write_yaml(tmp_path / "r.yaml", "task: [lp_mmlu, lp_arc_like]\nlimit: 3\n"), prune_drop)
    assert values == {"task": ["lp_mmlu", "lp_arc_like"], "limit": 3}


# --- input digests ------------------------------------------------------------------------------------------
def test_input_digests_name_local_files_and_folders_by_content(tmp_path):
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "a.yaml").write_text("task: a\n")
    (tmp_path / "corpus.txt").write_text("hello\n")
    found = input_digests(["tasks", "corpus.txt", "builtin:pydoc", "--x", "missing"], str(tmp_path))
    assert set(found) == {"tasks", "corpus.txt"}
    before = found["tasks"]
    (tmp_path / "tasks" / "a.yaml").write_text("task: b\n")
    assert content_digest(tmp_path / "tasks") != before
    (tmp_path / "tasks" / "a.yaml").write_text("task: a\n")
    assert content_digest(tmp_path / "tasks") == before  # content, not modification time


def test_command_to_rerun_saves_a_heal_again_inside_the_new_out():
    recorded = ["heal", "m", "--remove", "2", "--save", "ckpt", "--overwrite", "--out", "old"]
    assert command_to_rerun(recorded, Path("/new")) == [
        "heal", "m", "--remove", "2", "--out", "/new", "--save", str(Path("/new") / "healed-checkpoint")
    ]  # fmt: skip


def test_command_to_rerun_replaces_out_and_drops_resume():
    recorded = ["prune-drop", "m", "--task", "x", "--out", "old", "--resume", "--quiet", "--limit", "3"]
    assert command_to_rerun(recorded, Path("/new")) == [
        "prune-drop",
        "m",
        "--task",
        "x",
        "--limit",
        "3",
        "--out",
        "/new",
    ]


def test_differences_ignore_timing_and_find_any_changed_value():
    recorded = {"schema": "s", "run": {"seconds": 1.0}, "tokens_per_second": 5.0, "x": [0.1, float("nan")]}
    same = {"schema": "s", "run": {"seconds": 9.0}, "tokens_per_second": 7.0, "x": [0.1, float("nan")]}
    assert differences(recorded, same) == []
    changed = {**same, "x": [0.1 + 1e-12, float("nan")]}
    found = differences(recorded, changed)
    assert [d.path for d in found] == ["x[0]"] and 0 < found[0].magnitude < 1e-11


# --- rerun --------------------------------------------------------------------------------------------------
def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`python -m layerprobe ARGS` in its own process (rerun starts one too), from `cwd`."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[2]), *sys.path])}
    return subprocess.run(
        [sys.executable, "-m", "layerprobe", *args], cwd=cwd, env=env, capture_output=True, text=True, check=False
    )


@pytest.mark.slow
def test_rerun_reproduces_an_angular_result_bit_for_bit(tiny_checkpoints, tmp_path):
    done = run_cli(*angular_args(tiny_checkpoints["llama"], tmp_path / "run"), "--quiet", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    again = run_cli("rerun", str(tmp_path / "run" / "angular.json"), "--quiet", cwd=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "reproduced: every recorded value" in again.stdout
    first = json.loads((tmp_path / "run" / "angular.json").read_text())
    second = json.loads((tmp_path / "run-rerun" / "angular.json").read_text())
    assert first["distance"] == second["distance"] and first["distance_stderr"] == second["distance_stderr"]
    # A second rerun into the same folder never overwrites it.
    refused = run_cli("rerun", str(tmp_path / "run"), cwd=tmp_path)
    assert refused.returncode == 2 and "a rerun never overwrites a result" in refused.stderr


@pytest.mark.slow
@pytest.mark.parametrize(
    "command",
    [
        ["depth", "--dataset", "builtin:pydoc", "--tokens", "256", "--seq-len", "128"],
        ["prune-drop", "--task", "lp_arc_like", "--include-path", str(TASKS), "--limit", "4"],
        ["prune-curve", "--task", "corpus", "--dataset", "builtin:pydoc", "--tokens", "256", "--seq-len", "128"],
    ],
    ids=["depth", "prune-drop", "prune-curve"],
)
def test_rerun_reproduces_each_result_kind(tiny_checkpoints, tmp_path, command):
    kind = {"depth": "depth", "prune-drop": "prune_drop", "prune-curve": "prune_curve"}[command[0]]
    done = run_cli(command[0], str(tiny_checkpoints["llama"]), *command[1:], "--out", "run", "--quiet", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    again = run_cli("rerun", f"run/{kind}.json", "--out", "again", "--quiet", cwd=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "reproduced" in again.stdout and (tmp_path / "again" / f"{kind}.json").is_file()


@pytest.mark.slow
def test_rerun_reproduces_a_heal_with_lora_and_a_saved_checkpoint(tiny_checkpoints, tmp_path):
    """heal (linear+lora, --save) re-run from heal.json: every recorded value equal; the first checkpoint untouched."""
    done = run_cli(
        "heal", str(tiny_checkpoints["llama"]), "--remove", "2", "--dataset", "builtin:pydoc", "--tokens", "256",
        "--held-out-tokens", "128", "--seq-len", "64", "--device", "cpu", "--method", "linear+lora", "--steps", "4",
        "--rank", "2", "--save", "healed", "--out", "run", "--quiet", cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    before = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "healed").iterdir()}
    again = run_cli("rerun", "run/heal.json", "--out", "again", "--quiet", cwd=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "reproduced: every recorded value" in again.stdout
    assert (tmp_path / "again" / "healed-checkpoint" / "config.json").is_file()  # saved again, in the new --out
    assert {p.name: p.stat().st_mtime_ns for p in (tmp_path / "healed").iterdir()} == before
    first, second = (json.loads((tmp_path / d / "heal.json").read_text()) for d in ("run", "again"))
    assert first["held_out"] == second["held_out"] and first["lora"] == second["lora"]
    assert first["checkpoint"] == str(tmp_path / "healed")


def test_rerun_refuses_when_a_task_file_changed(tiny_checkpoints, tmp_path):
    tasks = tmp_path / "tasks"
    shutil.copytree(TASKS, tasks)
    result_file = tmp_path / "run" / "prune_drop.json"
    result_file.parent.mkdir()
    recorded = {
        "argv": ["prune-drop", str(tiny_checkpoints["llama"]), "--include-path", str(tasks)],
        "inputs": input_digests([str(tasks)], str(tmp_path)),
    }
    assert recorded["inputs"]  # the folder was digested
    write_prune_drop_with_command(result_file, recorded, tmp_path)
    (tasks / "lp_arc_like.yaml").write_text((tasks / "lp_arc_like.yaml").read_text() + "\n# edited\n")
    result = invoke("rerun", result_file)
    assert result.exit_code == 2, result.output
    assert "cannot be re-run as recorded" in result.output and "content changed" in result.output
    assert not (tmp_path / "run-rerun").exists()


def test_rerun_refuses_a_result_without_a_recorded_command(tmp_path):
    from factories import angular_dict

    path = tmp_path / "angular.json"
    path.write_text(json.dumps(angular_dict()))
    result = invoke("rerun", path)
    assert result.exit_code == 2 and "does not record the command that made it" in result.output


def write_prune_drop_with_command(path: Path, recorded: dict, cwd: Path) -> None:
    """A valid prune_drop.json (from the factories) whose run block records a command and its inputs."""
    from factories import prune_dict

    data = prune_dict()
    data["run"].update(command=recorded["argv"], cwd=str(cwd), inputs=recorded["inputs"])
    path.write_text(json.dumps(data))


def test_a_config_boolean_is_no_number_of_heal(tmp_path):
    # `rank: true` was LoRA rank 1 and `repeats: false` "--repeats must be a positive integer, got 0".
    for command, text, extra in (("heal", "rank: true\n", ["--remove", "1"]), ("gain", "repeats: false\n", [tmp_path])):
        config = write_yaml(tmp_path / "run.yaml", text)
        result = invoke(command, tmp_path / "no-model", *extra, "--config", config)
        assert result.exit_code == 2 and result.output.startswith("error: --config"), result.output
        assert f"{text.split(':')[0]} takes a value, not {text.split()[1]}" in " ".join(result.output.split())
