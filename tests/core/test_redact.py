"""Secrets never reach a file or the terminal: `--model-args token=…`, `*_key`, `HF_TOKEN` (core/redact.py)."""

from __future__ import annotations

import json
import shutil

import pytest
from command_line import invoke
from factories import TASKS_DIR

from layerprobe.core import REDACTED, ModelSpec, known_secrets, parse_model_args, redacted, scrub
from layerprobe.core.redact import is_secret_key


@pytest.mark.parametrize(
    ("key", "secret"),
    [
        ("token", True),
        ("hub_token", True),
        ("api_key", True),
        ("openai_api_key", True),
        ("Password", True),
        ("secret", True),
        ("low_cpu_mem_usage", False),
        ("max_memory", False),
        ("tokenizer", False),
        ("keys", False),
    ],
)
def test_secret_keys(key, secret):
    assert is_secret_key(key) is secret


def test_redacted_replaces_secret_values_at_any_depth_and_keeps_the_rest():
    args = {"token": "hf_abcdef", "low_cpu_mem_usage": True, "headers": {"api_key": "k-123456", "n": 1}, "x": None}
    assert redacted(args) == {
        "token": REDACTED,
        "low_cpu_mem_usage": True,
        "headers": {"api_key": REDACTED, "n": 1},
        "x": None,
    }
    assert args["token"] == "hf_abcdef"  # the original (what from_pretrained gets) is untouched


def test_a_spec_remembers_its_secrets_and_records_them_redacted():
    spec = ModelSpec("m", model_args=parse_model_args("token=hf_SPECxyz123,low_cpu_mem_usage=true"))
    assert spec.model_args["token"] == "hf_SPECxyz123"
    assert spec.recorded_args == {"token": REDACTED, "low_cpu_mem_usage": True}
    assert "hf_SPECxyz123" in known_secrets()
    assert scrub("path/hf_SPECxyz123/x and hf_SPECxyz123") == f"path/{REDACTED}/x and {REDACTED}"


def test_text_that_fails_to_parse_is_scrubbed_in_its_own_error():
    with pytest.raises(Exception) as caught:
        parse_model_args("hub_token='hf_BROKENxyz987'}")
    assert "hf_BROKENxyz987" in str(caught.value)  # the raw message still has it ...
    assert "hf_BROKENxyz987" not in scrub(str(caught.value))  # ... what reaches a terminal or file does not


def test_short_values_and_the_token_variable(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_FROMENVabc")
    assert scrub("uses hf_FROMENVabc") == f"uses {REDACTED}"
    parse_model_args("token=ab")  # too short to search for: it would match anywhere
    assert "ab" not in known_secrets()


def _leaks(root, secret: str) -> list[str]:
    return [str(p) for p in root.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]


@pytest.mark.slow
def test_no_secret_reaches_any_file_or_the_terminal(tiny_checkpoints, tmp_path):
    """angular, prune-drop (with samples) and prune with a token in --model-args and in HF_TOKEN: grep all."""
    token, env_token = "hf_SECRETmodelargs0123456789", "hf_SECRETenvironment987654"
    env = {"HF_TOKEN": env_token, "COLUMNS": "250"}
    model = tiny_checkpoints["llama"]
    args = ["--model-args", f"token={token},low_cpu_mem_usage=true", "--device", "cpu"]
    angular = invoke(
        "angular", model, "--dataset", "builtin:pydoc", "--tokens", 300, *args, "--out", tmp_path / "a", env=env
    )
    assert angular.exit_code == 0, angular.output
    recorded = json.loads((tmp_path / "a" / "angular.json").read_text())["model"]["model_args"]
    assert recorded == {"token": REDACTED, "low_cpu_mem_usage": True}  # known that one was given
    drop = invoke(
        "prune-drop", model, "--task", "lp_arc_like", "--include-path", TASKS_DIR, "--limit", 2, "--layers", "0-1",
        "--log-samples", *args, "--out", tmp_path / "d", env=env,
    )  # fmt: skip
    assert drop.exit_code == 0, drop.output
    # The export takes no --model-args: the token variable's value in the source path must not be copied.
    source = tmp_path / env_token / "llama"
    shutil.copytree(model, source)
    export = invoke(
        "prune", source, "--remove", 1, "--save", tmp_path / "p", "--mergekit-yaml", tmp_path / "m.yaml", env=env
    )
    assert export.exit_code == 0, export.output
    # A run that fails quotes the option text: still no token.
    failed = invoke("angular", model, "--model-args", f"token={token}}}", env=env)
    assert failed.exit_code == 2 and REDACTED in failed.output
    written = [tmp_path / "a", tmp_path / "d", tmp_path / "p", tmp_path / "m.yaml"]
    assert (tmp_path / "d" / "samples").is_dir() and (tmp_path / "p" / "layerprobe.json").is_file()
    for secret in (token, env_token):
        assert not any(_leaks(root, secret) if root.is_dir() else secret in root.read_text() for root in written)
        for result in (angular, drop, export, failed):
            assert secret not in result.output
