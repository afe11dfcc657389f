"""Every cheap mistake is reported before any weight is read, as one red line with a hint and exit 2.

A spy replaces transformers' `PreTrainedModel.from_pretrained` (the one place every model class reads
weights through): each bad input must exit 2 with its message while the spy was never called. A
positive control shows the spy does see a weight load when the inputs are good.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import transformers as tf
from command_line import flat
from factories import TASKS_DIR, copy_without_tokenizer, malformed_task_yaml
from typer.testing import CliRunner

from layerprobe.cli.app import app
from layerprobe.core import MAX_TOKENS

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2]


class WeightsRead(Exception):
    """Raised by the spy: a weight load was attempted."""


@pytest.fixture
def weight_spy(monkeypatch):
    calls = []

    def spy(cls, *args, **kwargs):
        calls.append(cls.__name__)
        raise WeightsRead(cls.__name__)

    monkeypatch.setattr(tf.PreTrainedModel, "from_pretrained", classmethod(spy))
    return calls


def _run(args):
    return runner.invoke(app, args)


def _refused(result, message, calls):
    assert result.exit_code == 2, result.output
    assert message in flat(result.output), result.output
    assert "Traceback" not in result.output and "WeightsRead" not in result.output
    assert calls == [], f"weights were read before the mistake was reported: {calls}"


def test_spy_sees_a_weight_load_when_inputs_are_good(tiny_checkpoints, tmp_path, weight_spy):
    for command in ("angular", "depth"):
        result = _run(
            [command, str(tiny_checkpoints["llama"]), "--dataset", "builtin:pydoc", "--tokens", "256", "--quiet"]
            + ["--out", str(tmp_path / command)]
        )
        assert isinstance(result.exception, WeightsRead), result.output
    assert len(weight_spy) == 2


@pytest.mark.parametrize("command", ["angular", "depth"])
@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("corpus_too_small", "text tokens"),
        ("corpus_missing", "No corpus file"),
        ("corpus_no_field", "no field 'text'"),
        ("hub_corpus_unreachable", "Cannot open corpus"),
        ("tokens_too_many", f"at most {MAX_TOKENS:,}"),
        ("tokens_1e20", f"at most {MAX_TOKENS:,}"),
        ("out_is_file", "is a file, not a directory"),
        ("no_tokenizer", "Cannot load"),
        ("bad_positions", "'middle' is not one of 'all', 'last'"),
        ("bad_dtype", "'float8' is not one of"),
        ("bad_layers_path", "does not exist"),
        ("bad_config", "Should have a `model_type` key"),
    ],
)
def test_streaming_commands_fail_before_weights(tiny_checkpoints, tmp_path, weight_spy, command, case, message):
    model = str(tiny_checkpoints["llama"])
    dataset, extra, out = "builtin:pydoc", ["--tokens", "256"], tmp_path / "out"
    if case == "corpus_too_small":
        extra = ["--tokens", "5000000"]  # the stdlib's pydoc text holds far less
    elif case == "corpus_missing":
        dataset = str(tmp_path / "missing.jsonl")
    elif case == "corpus_no_field":
        dataset = str(tmp_path / "rows.jsonl")
        Path(dataset).write_text(json.dumps({"body": "some text " * 50}) + "\n")
    elif case == "hub_corpus_unreachable":
        dataset = "no-such-org/no-such-dataset"  # HF_DATASETS_OFFLINE=1 in the test environment
    elif case == "tokens_too_many":
        extra = ["--tokens", str(MAX_TOKENS + 1)]
    elif case == "tokens_1e20":
        extra = ["--tokens", "1e20"]
    elif case == "out_is_file":
        out.write_text("not a directory")
    elif case == "no_tokenizer":
        model = str(copy_without_tokenizer(tiny_checkpoints["llama"], tmp_path / "no_tok"))
    elif case == "bad_positions":
        extra += ["--positions", "middle"]
    elif case == "bad_dtype":
        extra += ["--dtype", "float8"]
    elif case == "bad_layers_path":
        extra += ["--layers-path", "model.nothing"]
    elif case == "bad_config":
        model = str(copy_without_tokenizer(tiny_checkpoints["llama"], tmp_path / "bad_config"))
        (Path(model) / "config.json").write_text(json.dumps({"hidden_size": 8}))
    result = _run([command, model, "--dataset", dataset, *extra, "--quiet", "--out", str(out)])
    _refused(result, message, weight_spy)
    if case != "out_is_file":
        assert not out.exists()  # nothing half-written


def test_out_under_a_file_is_refused(tiny_checkpoints, tmp_path, weight_spy):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    result = _run(
        ["angular", str(tiny_checkpoints["llama"]), "--dataset", "builtin:pydoc", "--tokens", "256"]
        + ["--quiet", "--out", str(blocker / "sub")]
    )
    _refused(result, "cannot be created", weight_spy)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")
def test_read_only_out_is_refused(tiny_checkpoints, tmp_path, weight_spy):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        result = _run(
            ["angular", str(tiny_checkpoints["llama"]), "--dataset", "builtin:pydoc", "--tokens", "256"]
            + ["--quiet", "--out", str(locked / "run")]
        )
    finally:
        locked.chmod(0o700)
    _refused(result, "is not writable", weight_spy)


@pytest.mark.parametrize(
    ("args", "message"),
    [(["--tokens", "1e20"], f"at most {MAX_TOKENS:,}"), (["--tokens", "nan"], "not a whole number")],
)
def test_demo_fails_before_weights(minilm, tmp_path, weight_spy, args, message):
    _refused(_run(["demo", *args, "--quiet", "--out", str(tmp_path / "o")]), message, weight_spy)
    blocker = tmp_path / "file"
    blocker.write_text("x")
    _refused(_run(["demo", "--quiet", "--out", str(blocker)]), "is a file, not a directory", weight_spy)


def test_layers_command_reads_no_weights(tiny_checkpoints, weight_spy):
    result = _run(["layers", str(tiny_checkpoints["llama"]), "--no-placement"])
    assert result.exit_code == 0 and weight_spy == [], result.output


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("save_under_file", "cannot be created"),
        ("save_is_file", "is a file"),
        ("mergekit_is_dir", "--mergekit-yaml"),
        ("bad_dtype", "'float8' is not one of"),
        ("remove_out_of_range", "out of range"),
    ],
)
def test_prune_export_fails_before_weights(tiny_checkpoints, tmp_path, weight_spy, case, message):
    save, extra = tmp_path / "pruned", ["--remove", "1"]
    blocker = tmp_path / "file"
    blocker.write_text("x")
    if case == "save_under_file":
        save = blocker / "pruned"
    elif case == "save_is_file":
        save = blocker
    elif case == "mergekit_is_dir":
        extra += ["--mergekit-yaml", str(tmp_path)]
    elif case == "bad_dtype":
        extra += ["--dtype", "float8"]
    elif case == "remove_out_of_range":
        extra = ["--remove", "9"]
    result = _run(["prune", str(tiny_checkpoints["llama"]), "--save", str(save), *extra, "--quiet"])
    _refused(result, message, weight_spy)
    assert not (tmp_path / "pruned").exists()


def _prune(model, *args):
    return _run(["prune-drop", str(model), "--quiet", *args])


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("malformed_yaml_task", "task YAML cannot be read"),
        ("missing_yaml_task", "does not exist"),
        ("include_path_is_file", "is a file, not a folder"),
        ("fewshot_pool_too_small", "few-shot examples"),
        ("limit_nan", "--limit must be a positive finite number"),
        ("limit_inf", "--limit must be a positive finite number"),
        ("layers_out_of_range", "out of range"),
        ("out_is_file", "is a file, not a directory"),
        ("batch_size_bad", "'auto:N'"),
        ("engine_bad", "'fast' is not one of 'auto', 'simple', 'shared'"),
        ("bad_layers_path", "does not exist"),
    ],
)
def test_prune_drop_fails_before_weights(tiny_checkpoints, tmp_path, weight_spy, case, message):
    out = tmp_path / "out"
    args = ["--task", "lp_arc_like", "--include-path", str(TASKS_DIR), "--out", str(out)]
    if case == "malformed_yaml_task":
        args = ["--task", str(malformed_task_yaml(tmp_path)), "--out", str(out)]
    elif case == "missing_yaml_task":
        args = ["--task", str(tmp_path / "nope.yaml"), "--out", str(out)]
    elif case == "include_path_is_file":
        args = ["--task", "lp_arc_like", "--include-path", str(TASKS_DIR / "lp_arc_like.yaml"), "--out", str(out)]
    elif case == "fewshot_pool_too_small":
        args += ["--num-fewshot", "9"]  # lp_arc_like's train split holds 8 examples
    elif case == "limit_nan":
        args += ["--limit", "nan"]
    elif case == "limit_inf":
        args += ["--limit", "inf"]
    elif case == "layers_out_of_range":
        args += ["--layers", "0-9"]
    elif case == "out_is_file":
        out.write_text("x")
    elif case == "batch_size_bad":
        args += ["--batch-size", "many"]
    elif case == "engine_bad":
        args += ["--engine", "fast"]
    elif case == "bad_layers_path":
        args += ["--layers-path", "model.nothing"]
    result = _prune(tiny_checkpoints["llama"], *args)
    _refused(result, message, weight_spy)
    if case != "out_is_file":
        assert not out.exists()


def test_fewshot_pool_message_names_the_usable_count(tiny_checkpoints, tmp_path, weight_spy):
    result = _prune(
        tiny_checkpoints["llama"],
        "--task",
        "lp_arc_like",
        "--include_path",
        str(TASKS_DIR),
        "--num_fewshot",
        "9",
        "--out",
        str(tmp_path / "o"),
    )
    _refused(result, "task lp_arc_like has 8 few-shot examples", weight_spy)
    assert "--num-fewshot 8 or less" in result.output


def test_fewshot_within_pool_reaches_the_weights(tiny_checkpoints, tmp_path, weight_spy):
    result = _prune(
        tiny_checkpoints["llama"],
        "--task",
        "lp_arc_like",
        "--include-path",
        str(TASKS_DIR),
        "--num-fewshot",
        "8",
        "--out",
        str(tmp_path / "o"),
    )
    assert isinstance(result.exception, WeightsRead), result.output


@pytest.mark.slow
def test_broken_yaml_in_include_path_is_named(tiny_checkpoints, tmp_path, weight_spy):
    folder = tmp_path / "tasks"
    folder.mkdir()
    shutil.copy(malformed_task_yaml(tmp_path), folder / "lp_bad.yaml")
    result = _prune(
        tiny_checkpoints["llama"], "--task", "lp_bad", "--include-path", str(folder), "--out", str(tmp_path / "o")
    )
    _refused(result, "cannot be read", weight_spy)
    assert "lp_bad.yaml (line 3" in result.output


def test_comma_task_lists_and_tasks_alias(tiny_checkpoints, tmp_path, weight_spy):
    """`--tasks a,b` is read as two tasks: the second one's error shows it was reached."""
    bad = malformed_task_yaml(tmp_path)
    for option in ("--tasks", "--task"):
        result = _prune(
            tiny_checkpoints["llama"],
            option,
            f"lp_arc_like,{bad}",
            "--include-path",
            str(TASKS_DIR),
            "--out",
            str(tmp_path / "o"),
        )
        _refused(result, "task YAML cannot be read", weight_spy)


def _cli(env_changes, *args):
    env = {k: v for k, v in os.environ.items() if k not in env_changes or env_changes[k] is not None}
    env.update({k: v for k, v in env_changes.items() if v is not None})
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run(
        [sys.executable, "-m", "layerprobe", *args], capture_output=True, text=True, env=env, timeout=300, check=False
    )


@pytest.mark.slow  # waits out the hub client's connection timeout (~35 s)
def test_unreachable_hub_is_one_line_with_the_offline_hint(tmp_path):
    """A closed localhost port stands in for the Hub: one error line and one hint, no retry warnings."""
    closed = {"HF_HUB_OFFLINE": None, "HF_ENDPOINT": "http://127.0.0.1:9", "HF_HOME": str(tmp_path / "hf")}
    done = _cli(closed, "angular", "no-such-org/no-such-model", "--out", str(tmp_path / "o"))
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 2, done.stderr
    assert lines[0].startswith("error:") and "Hub cannot be reached" in lines[0]
    assert "HF_HUB_OFFLINE=1" in lines[1] and "hf download no-such-org/no-such-model" in lines[1]
    offline = _cli({"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}, "angular", "no-such-org/x")
    assert offline.returncode == 2 and "offline mode is set (HF_HUB_OFFLINE=1)" in offline.stderr
    assert "hf download no-such-org/x" in offline.stderr and len(offline.stderr.strip().splitlines()) == 2


@pytest.mark.slow
def test_unreachable_hub_corpus_is_one_error_without_retry_warnings(tiny_checkpoints, tmp_path):
    """The default C4 through a closed port: huggingface_hub retries (~25 s) silently, then one error."""
    closed = {
        "HF_HUB_OFFLINE": None,
        "HF_DATASETS_OFFLINE": None,
        "HF_ENDPOINT": "http://127.0.0.1:9",
        "HF_HOME": str(tmp_path / "hf"),
    }
    done = _cli(closed, "angular", str(tiny_checkpoints["llama"]), "--out", str(tmp_path / "o"))
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 2 and "Retrying" not in done.stderr, done.stderr
    assert lines[0].startswith("error: Cannot open corpus allenai/c4") and "hf download" in lines[1]
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
def test_unknown_task_is_reported_before_weights(tiny_checkpoints, tmp_path, weight_spy):
    result = _prune(
        tiny_checkpoints["llama"],
        "--task",
        "lp_arc_likee",
        "--include-path",
        str(TASKS_DIR),
        "--out",
        str(tmp_path / "o"),
    )
    _refused(result, "unknown lm-eval task", weight_spy)
    assert "did you mean lp_arc_like" in flat(result.output)
