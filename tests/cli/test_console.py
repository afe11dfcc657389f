"""The console: progress bars (cleared before an error is printed, kept otherwise), escaping, --quiet."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from command_line import invoke
from factories import TASKS_DIR
from rich.console import Console
from transformers.utils import logging as hf_logging

from layerprobe.cli import console
from layerprobe.core import BUILTIN_CORPUS


def test_progress_bar_is_cleared_before_an_error():
    buffer = io.StringIO()
    progress = console.RichProgress(quiet=False)
    progress.bar.live.console = Console(file=buffer, force_terminal=False, width=120)
    with pytest.raises(RuntimeError), progress.running():
        progress.stage("Loading model", None)
        raise RuntimeError("boom")
    assert "Loading model" not in buffer.getvalue()
    buffer_ok = io.StringIO()
    progress = console.RichProgress(quiet=False)
    progress.bar.live.console = Console(file=buffer_ok, force_terminal=False, width=120)
    with progress.running():
        progress.stage("Loading model", None)
    assert "Loading model" in buffer_ok.getvalue()  # the control: without an error the bar stays


def test_safe_text_shows_control_characters_escaped():
    assert console.safe_text("a\x1b[2Jb\rc\x07d\x9be\tf\ng") == "a\\x1b[2Jb\\x0dc\\x07d\\x9be\tf\ng"
    assert console.safe_text("plain ünïcode → ok") == "plain ünïcode → ok"


def test_a_terminal_keeps_its_colours_but_never_prints_a_users_escape_sequence():
    buffer = io.StringIO()
    terminal = console.SafeConsole(file=buffer, force_terminal=True, color_system="standard", width=120)
    terminal.print("[bold red]error:[/] key 'x\x1b]0;owned\x07' and\x1b[2J", highlight=False)
    text = buffer.getvalue()
    assert "\x1b[1;31m" in text  # rich's own style
    assert "\x1b]0;" not in text and "\x1b[2J" not in text and "\x07" not in text
    assert "x\\x1b]0;owned" in text and "and\\x1b[2J" in text  # (rich itself drops the bell)


@pytest.mark.parametrize("where", ["model-args key", "path"])
def test_an_escape_sequence_in_user_input_is_shown_escaped_in_errors(tiny_checkpoints, tmp_path, where):
    hostile = "\x1b[2J\x1b]0;pwned\x07"
    if where == "path":
        result = invoke("angular", tmp_path / f"no{hostile}model", "--tokens", 100)
    else:
        result = invoke(
            "angular",
            tiny_checkpoints["llama"],
            "--model-args",
            f"k{hostile}=1",
            "--dataset",
            BUILTIN_CORPUS,
            "--tokens",
            200,
        )
    assert result.exit_code == 2, result.output
    assert "\x1b" not in result.output and "\x07" not in result.output
    assert "\\x1b[2J\\x1b]0;pwned\\x07" in result.output


def test_quiet_silences_library_warnings_and_transformers_logs_only_while_asked():
    before = hf_logging.get_verbosity()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with console.quiet_libraries(True):
            warnings.warn("hidden", FutureWarning, stacklevel=1)
            warnings.warn("hidden too", UserWarning, stacklevel=1)
            assert hf_logging.get_verbosity() == hf_logging.ERROR
            assert os.environ["TRANSFORMERS_VERBOSITY"] == "error"
        with console.quiet_libraries(False):
            warnings.warn("shown", FutureWarning, stacklevel=1)
    assert [str(w.message) for w in seen] == ["shown"]
    assert hf_logging.get_verbosity() == before


@pytest.mark.slow
def test_quiet_prune_drop_prints_no_warning_lines(tiny_checkpoints, tmp_path):
    """No library warning in normal use (the shared engine uses the supported cache argument), and --quiet
    prints nothing at all on stderr. (That `quiet_libraries` silences a warning that does occur is the
    test above.)"""
    command = [sys.executable, "-m", "layerprobe", "prune-drop", str(tiny_checkpoints["llama"]), "--task"]
    command += ["lp_arc_like", "--include-path", str(TASKS_DIR), "--limit", "2", "--layers", "0", "--device", "cpu"]
    env = {k: v for k, v in os.environ.items() if k != "TRANSFORMERS_VERBOSITY"}
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[2]), env.get("PYTHONPATH", "")])
    runs = {}
    for quiet in (True, False):
        flags = ["--quiet"] if quiet else []
        runs[quiet] = subprocess.run(
            [*command, *flags, "--out", str(tmp_path / str(quiet))],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert runs[quiet].returncode == 0, runs[quiet].stderr[-3000:]
    assert "Warning" not in runs[False].stderr and "deprecated" not in runs[False].stderr, runs[False].stderr
    assert "Warning" not in runs[True].stderr and "deprecated" not in runs[True].stderr, runs[True].stderr
    assert runs[True].stderr.strip() == ""


def test_the_rate_is_what_was_done_over_the_time_it_took():
    """12 evaluations in 36 s, eleven of them reported together at the end, are 0.33 eval/s, not thousands."""
    now = [100.0]
    progress = console.RichProgress(quiet=True)
    progress.bar.get_time = lambda: now[0]
    progress.stage("prune-drop", 12, "eval")
    now[0] = 136.0 - 0.011
    progress.advance(1)
    for _ in range(11):
        now[0] += 0.001
        progress.advance(1)
    rate = progress.bar.tasks[progress.task].fields["rate"]
    assert rate == f"{12 / 36:.2g} eval/s" == "0.33 eval/s"
