"""Running the command line in-process, and reading what it printed the way a user reads it."""

from __future__ import annotations

import re
from pathlib import Path

from typer.testing import CliRunner

from layerprobe.cli.app import app

RESULT = "prune_drop.json"


def invoke(*args, env: dict[str, str] | None = None):
    """`layerprobe *args` (paths and numbers given as they are), its output captured."""
    return CliRunner().invoke(app, [str(a) for a in args], env=env)


def invoke_prune_drop(*args):
    """`layerprobe prune-drop *args` on a wide console, so that rich does not wrap the tables' titles."""
    return invoke("prune-drop", *args, env={"COLUMNS": "250"})


def flat(text: str) -> str:
    """Output with rich's panel borders and line wrapping taken out."""
    return " ".join(re.sub("[│╭╮╰╯─]", " ", text).split())


def assert_one_line_error(result, message: str, out: Path) -> None:
    """Exit 2 with one `error:` line holding `message` (and at most a `hint:` line), no prune-drop result."""
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = result.output.strip().splitlines()
    assert lines[0].startswith("error: ") and message in lines[0], result.output
    assert len(lines) == 1 or (len(lines) == 2 and lines[1].startswith("hint: ")), result.output
    assert not (out / RESULT).exists()


def flat_help(*args: str) -> str:
    """`layerprobe *args --help` on a wide terminal, flattened (exit 0 checked)."""
    result = invoke(*args, "--help", env={"COLUMNS": "400", "TERMINAL_WIDTH": "400"})
    assert result.exit_code == 0, result.output
    return flat(result.output)
