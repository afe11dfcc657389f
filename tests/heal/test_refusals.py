"""Every bad input of `layerprobe heal` is one line (and a hint), exit 2, before any weight loads."""

from __future__ import annotations

import pytest
from command_line import assert_one_line_error, invoke
from factories import build_checkpoint

from layerprobe.core import BUILTIN_CORPUS


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    return build_checkpoint("llama", tmp_path_factory.mktemp("heal-refusals") / "src", num_layers=4)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "Nothing to remove."),
        (("--remove", "0-3", "--method", "lora"), "removes all"),
        (("--remove", "2", "--method", "cubic"), "Unknown --method 'cubic'"),
        (("--remove", "2", "--method", "lora", "--steps", "0"), "--steps must be a positive integer"),
        (("--remove", "2", "--method", "lora", "--rank", "0"), "--rank must be a positive integer"),
        (("--remove", "0"), "block 0 has none"),
        (("--remove", "2", "--ridge", "-1"), "--ridge must be"),
        pytest.param(
            ("--remove", "2", "--tokens", "300000", "--held-out-tokens", "300000"),
            "--held-out-tokens 300,000 positions",
            marks=pytest.mark.slow,  # streams the whole builtin corpus
        ),
    ],
)
def test_bad_inputs_are_one_line_before_weights(source, tmp_path, forbid_weight_loading, args, message):
    forbid_weight_loading()
    out = tmp_path / "out"
    result = invoke("heal", source, *args, "--dataset", BUILTIN_CORPUS, "--seq-len", 64, "--out", out, "--quiet")
    assert_one_line_error(result, message, out)
    assert not (out / "heal.json").exists()
