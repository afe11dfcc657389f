"""The loading options on the command line: conflicting or unusable ones are one error line, exit 2, before
any weight is read."""

from __future__ import annotations

import importlib.util

import pytest
import transformers as tf
from factories import TASKS_DIR
from typer.testing import CliRunner

from layerprobe.cli.app import app
from layerprobe.core import BUILTIN_CORPUS

runner = CliRunner()


def one_line_error(result, *needles: str) -> None:
    assert result.exit_code == 2, result.output
    assert "error:" in result.output and "Traceback" not in result.output
    text = " ".join(result.output.split())  # rich wraps long lines
    for needle in needles:
        assert needle in text, result.output


CONFLICTS = [
    (["--load-in-4bit", "--load-in-8bit"], ["--load-in-4bit and --load-in-8bit"]),
    (["--model-args", "dtype=float16"], ["'dtype'", "--dtype"]),
    (["--model-args", "device_map=auto"], ["'device_map'", "--device-map"]),
    (["--model-args", "revision=main"], ["--revision"]),
    (["--model-args", "trust_remote_code=true"], ["--trust-remote-code"]),
    (["--model-args", "load_in_4bit=true"], ["--load-in-4bit"]),
    (["--max-state-memory", "lots"], ["--max-state-memory"]),
    (["--device-map", "cpu"], ["--device-map 'cpu'", "--device cpu"]),
    (["--model-args", "max_memory={cpu:1GiB}"], ["max_memory", "--device-map auto"]),
    (["--device-map", "auto", "--model-args", "max_memory=lots"], ["max_memory", "not a mapping"]),
    (["--device-map", "auto", "--model-args", "max_memory={gpu:1GiB}"], ["'gpu', which is not a device"]),
    (["--device-map", "auto", "--model-args", "max_memory={cpu:banana}"], ["'banana', which is not a size"]),
]


@pytest.mark.parametrize(
    "command, extra, needles",
    [
        (command, extra, needles)
        for command in ("angular", "prune-drop", "depth")
        for extra, needles in CONFLICTS
        if command != "depth" or "--max-state-memory" not in extra  # depth holds no states: no such option
    ],
)
def test_conflicting_loading_options_exit_2(tiny_checkpoints, tmp_path, command, extra, needles):
    task = ["--task", "lp_arc_like", "--include-path", str(TASKS_DIR)] if command == "prune-drop" else []
    result = runner.invoke(app, [command, str(tiny_checkpoints["llama"]), *task, *extra, "--out", str(tmp_path)])
    one_line_error(result, *needles)
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("flag", ["--load-in-4bit", "--load-in-8bit"])
@pytest.mark.parametrize("command", ["angular", "prune-drop"])
def test_quantization_without_bitsandbytes_is_one_error_before_any_weight(
    tiny_checkpoints, tmp_path, monkeypatch, command, flag
):
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "bitsandbytes" else real_find_spec(name, *a)
    )
    reads: list[str] = []
    real_load = tf.PreTrainedModel.from_pretrained.__func__

    def watched(cls, *args, **kwargs):
        reads.append(cls.__name__)
        return real_load(cls, *args, **kwargs)

    monkeypatch.setattr(tf.PreTrainedModel, "from_pretrained", classmethod(watched))
    task = ["--task", "lp_arc_like", "--include-path", str(TASKS_DIR)] if command == "prune-drop" else []
    result = runner.invoke(app, [command, str(tiny_checkpoints["llama"]), *task, flag, "--out", str(tmp_path)])
    one_line_error(result, flag, "bitsandbytes", "pip install 'layerprobe[quant]'")
    assert reads == []  # refused before a single weight was read


HAVE_BNB = importlib.util.find_spec("bitsandbytes") is not None


@pytest.mark.skipif(HAVE_BNB, reason="bitsandbytes is installed here")
def test_quantization_error_in_this_environment(tiny_checkpoints, tmp_path):
    result = runner.invoke(app, ["angular", str(tiny_checkpoints["llama"]), "--load-in-4bit", "--out", str(tmp_path)])
    one_line_error(result, "pip install 'layerprobe[quant]'")


def test_unknown_model_arg_is_a_clear_error(tiny_checkpoints, tmp_path):
    result = runner.invoke(
        app,
        ["angular", str(tiny_checkpoints["llama"]), "--model-args", "no_such_keyword=1", "--dataset", BUILTIN_CORPUS]
        + ["--tokens", "64", "--quiet", "--out", str(tmp_path)],
    )
    one_line_error(result, "--model-args")
