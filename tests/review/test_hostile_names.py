"""Names no one expected (issue 26 §1): a lone surrogate, a non-UTF-8 run directory, a CR, raw HTML, a bell.

track, report and stability write such names escaped and never fail; track.md and stability.md keep one
row per line and never carry raw HTML; the terminal shows control characters escaped instead of dropping
them.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil

import pytest
from typer.testing import CliRunner

from layerprobe.cli import console
from layerprobe.cli.app import app
from layerprobe.core import markdown_text, terminal_text

runner = CliRunner()
KINDS = ("angular.json", "prune_drop.json", "depth.json", "prune_curve.json")


def run(*args):
    return runner.invoke(app, [*map(str, args)])


def edited_copy(source, target, model_id, revision=None, task=None):
    shutil.copytree(source, target)
    for name in KINDS:
        data = json.loads((target / name).read_text())
        data["model"]["id"] = model_id
        if revision is not None:
            data["model"]["revision"] = revision
        if task is not None and "tasks" in data:
            data["tasks"] = {task: next(iter(data["tasks"].values()))}
        (target / name).write_text(json.dumps(data))  # ensure_ascii: "\udcff" is valid JSON
    return target


@pytest.fixture
def odd_runs(review_runs, tmp_path):
    """Three runs of one model whose id holds a lone surrogate, a CR and a newline; one directory is not UTF-8."""
    root = os.fsencode(tmp_path)
    names = [b"a\xff", b"b", b"c"]
    dirs = []
    for step, name in zip((1000, 2000, 3000), names, strict=True):
        target = os.fsdecode(root + b"/" + name)
        from pathlib import Path

        dirs.append(
            edited_copy(
                review_runs.by_step[step],
                Path(target),
                f"org/m\udcff\r\nx/checkpoint-{step}",
                revision='<img src="https://example.com/x.png">',
                task="t\udcff\rk",
            )
        )
    return dirs


def test_track_writes_odd_names_escaped_and_one_row_per_run(odd_runs, tmp_path):
    out = tmp_path / "track"
    result = run("track", *odd_runs, "--out", out, "--format", "markdown", "--no-plot")
    assert result.exit_code == 0, result.output
    text = (out / "track.md").read_text(encoding="utf-8")
    assert "\r" not in text and "\udcff" not in text and "<img" not in text
    assert "\\udcff" in text and "\\x0d" in text
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    assert len(rows) == 1 + 3  # the header and one row per run: nothing split
    assert len({len(re.split(r"(?<!\\)\|", row)) for row in rows}) == 1
    assert json.loads((out / "track.json").read_text())["runs"][0]["model"].startswith("org/m\udcff")


@pytest.mark.slow
def test_report_writes_odd_names_escaped(odd_runs, tmp_path):
    result = run("report", *odd_runs, "--out", tmp_path / "page.html", "-q")
    assert result.exit_code == 0, result.output
    text = (tmp_path / "page.html").read_text(encoding="utf-8")
    assert "\\udcff" in text and "<img src=" not in text


def test_stability_heading_holds_a_newline_in_the_model_id(review_runs, tmp_path):
    first = edited_copy(review_runs.by_step[1000], tmp_path / "x", "org/m\n# injected\udcff")
    result = run("stability", first / "angular.json", first / "prune_drop.json", "--out", tmp_path / "s")
    assert result.exit_code == 0, result.output
    text = (tmp_path / "s" / "stability.md").read_text(encoding="utf-8")
    heading = text.splitlines()[0]
    assert heading.startswith("# Ranking stability: org/m\\x0a# injected\\udcff")
    assert not any(line.startswith("# injected") for line in text.splitlines())


def test_markdown_text_leaves_nothing_that_ends_a_cell_or_renders():
    hostile = "a|b\r\nc\u2028<img src=x>&\x07\udcff\\"
    text = markdown_text(hostile)
    assert "\r" not in text and "\n" not in text and "\u2028" not in text and "<" not in text
    assert re.split(r"(?<!\\)\|", text) == [text]
    assert text == "a\\|b\\x0d\\x0ac\\u2028&lt;img src=x&gt;&amp;\\x07\\udcff\\\\"


def test_the_terminal_shows_control_characters_and_surrogates_escaped_in_text_and_tables():
    from rich.table import Table

    buffer = io.StringIO()
    terminal = console.SafeConsole(file=buffer, force_terminal=False, width=200)
    terminal.print("wrote model\r\x07\x08s\udcff/x.json", highlight=False)
    table = Table()
    table.add_column("model")
    table.add_row("model\r\x07\x08S")
    terminal.print(table)
    text = buffer.getvalue()
    assert "wrote model\\x0d\\x07\\x08s\\udcff/x.json" in text
    assert "model\\x0d\\x07\\x08S" in text
    assert terminal_text("\udcff\x07") == "\\udcff\\x07"
