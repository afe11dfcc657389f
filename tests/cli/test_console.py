"""The console's progress bars: cleared before an error is printed, kept otherwise."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from layerprobe.cli import console


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
