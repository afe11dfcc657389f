"""Loading failures of the hub (gated, custom code, unknown id, unreachable) become one-line errors with a hint."""

from __future__ import annotations

import pytest
import transformers as tf

from layerprobe.core import ModelSpec
from layerprobe.core.errors import ModelNotFound
from layerprobe.model import load_model


@pytest.mark.parametrize(
    ("raised", "message", "hint"),
    [
        (
            OSError("You are trying to access a gated repo.\nMake sure to have access to it at https://hf.co/x."),
            "gated model",
            "licence",
        ),
        (
            ValueError(
                "The repository x contains custom code which must be executed. Please pass the argument "
                "`trust_remote_code=True` to allow custom code to be run."
            ),
            "own modelling code",
            "--trust-remote-code",
        ),
        (
            OSError(
                "x is not a local folder and is not a valid model identifier listed on 'https://huggingface.co/models'"
            ),
            "Cannot load",
            "hub id",
        ),
        (
            OSError(
                "We couldn't connect to 'https://huggingface.co' to load the files, and couldn't find them in the "
                "cached files."
            ),
            "cannot be reached",
            "local directory",
        ),
    ],
)
def test_loading_failures_become_one_line_errors(monkeypatch, raised, message, hint):
    def fail(*_args, **_kwargs):
        raise raised

    monkeypatch.setattr(tf.AutoConfig, "from_pretrained", fail)
    with pytest.raises(ModelNotFound, match=message) as info:
        load_model(ModelSpec("org/some-model"))
    assert hint in info.value.hint
    assert "\n" not in info.value.message
