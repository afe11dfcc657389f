"""What layerprobe prints: whole lines in pipes and CI logs, and text that rich must not read as markup."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from factories import RUN, angular_from_adjacent, arc_acc_result, model_info
from typer.testing import CliRunner

from layerprobe.cli.app import app
from layerprobe.cli.summaries import print_prune_summary
from layerprobe.results import PruneDropResult, write_json

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


# --- rich markup never eats text -----------------------------------------------------------------------


def test_bracketed_text_in_errors_survives(tmp_path):
    rules = tmp_path / "gate.toml"
    rules.write_text("[angular]\nlazy_treshold = 0.3\n")
    base = write_json(tmp_path / "b.json", angular_from_adjacent([0.5, 0.4, 0.3]).to_dict())
    result = runner.invoke(app, ["compare", str(base), str(base), "--rules", str(rules)])
    assert result.exit_code == 2
    assert "Unknown rule 'lazy_treshold' in [angular] of rules file" in " ".join(result.stderr.split())


def test_console_summaries_escape_names(capsys):
    result = arc_acc_result(0.7)
    result = PruneDropResult(model_info(3), "simple", {}, {"[bold]arc[/]": result.tasks["arc"]}, RUN)
    print_prune_summary(result)
    assert "[bold]arc[/]" in capsys.readouterr().out


# --- pipes and CI logs: nothing hard-wrapped at 80 columns ----------------------------------------------


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "80", "TERM": "dumb"}  # as some CI runners export
    return subprocess.run(
        [sys.executable, "-m", "layerprobe", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


@pytest.mark.slow  # over 3 s on 2 cores: the default tier stays under 3 minutes
def test_piped_output_is_never_wrapped(tmp_path):
    deep = tmp_path / ("a-rather-long-directory-name-for-a-ci-workspace-" * 2) / "candidate-run"
    base = write_json(deep / "base" / "angular.json", angular_from_adjacent([0.5, 0.4, 0.3]).to_dict())
    cand = write_json(deep / "cand" / "angular.json", angular_from_adjacent([0.5, 0.1, 0.1]).to_dict())
    done = run_cli("compare", str(base), str(cand), cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    lines = done.stdout.splitlines()
    assert any(str(base) in line and str(cand) in line for line in lines)  # the sides line, whole
    row = next(line for line in lines if "mean_adjacent" in line)
    assert "-0.1667" in row and "lower" in row and "≥ -0.0200" in row  # one table row, one line
    assert f"wrote {cand.parent / 'compare.png'}" in done.stderr.splitlines()
    missing = run_cli("plot", str(deep / "nowhere" / "angular.json"), cwd=tmp_path)
    assert missing.returncode == 2
    assert any(str(deep / "nowhere" / "angular.json") in line for line in missing.stderr.splitlines())
