"""`layerprobe compare`: exit 0 on pass, 1 on a regression, 2 on bad input; outputs where CI reads them.

The command runs through a local Typer app that registers the same command function the real app does."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET

import pytest
import typer
from command_line import invoke
from factories import (
    GATE_ADJACENT,
    GATE_PRUNED,
    angular_from_adjacent,
    bad_compare_inputs,
    gate_baseline_prune,
    metric_drop,
    prune_drop_result,
    write_result,
    write_run_dirs,
)
from typer.testing import CliRunner

from layerprobe.cli.app import friendly_errors
from layerprobe.cli.compare import compare as compare_command
from layerprobe.results import write_json

app = typer.Typer()
app.command("compare")(friendly_errors(compare_command))


@app.command("version")
def _version() -> None:  # a second command keeps `compare` a subcommand, as in the real app
    typer.echo("0")


runner = CliRunner()


def cli(*args: str):
    return runner.invoke(app, ["compare", *map(str, args)])


def test_cli_exit_zero_on_pass_and_writes_junit(tmp_path):
    base = write_result(tmp_path, "b/angular.json", angular_from_adjacent(GATE_ADJACENT))
    cand = write_result(tmp_path, "c/angular.json", angular_from_adjacent(GATE_ADJACENT))
    result = cli(base, cand, "--junit", tmp_path / "out" / "report.xml", "--no-plot")
    assert result.exit_code == 0, result.output
    assert "lazy_blocks" in result.stdout and "pass: all 2 rules passed" in result.stdout
    assert ET.parse(tmp_path / "out" / "report.xml").getroot().get("failures") == "0"
    assert not (tmp_path / "c" / "compare.png").exists()


def test_cli_exit_one_on_regression_with_markdown_only_on_stdout(tmp_path):
    base = write_result(tmp_path, "b/prune_drop.json", gate_baseline_prune())
    cand = write_result(
        tmp_path, "c/prune_drop.json", prune_drop_result({"arc_easy": {"acc": metric_drop(0.67, GATE_PRUNED)}})
    )
    result = cli(base, cand, "--max-drop", "0.02", "--format", "markdown")
    assert result.exit_code == 1, result.output
    assert result.stdout.startswith("### ❌ layerprobe compare: regression")
    assert "compare.png" not in result.stdout and "wrote" in result.stderr
    assert (tmp_path / "c" / "compare.png").is_file() and (tmp_path / "c" / "compare.pdf").is_file()
    assert cli(base, cand, "--max-drop", "0.05", "--format", "markdown", "--no-plot").exit_code == 0


def test_cli_flags_override_the_rules_file(tmp_path):
    base = write_result(tmp_path, "b/prune_drop.json", gate_baseline_prune())
    cand = write_result(
        tmp_path, "c/prune_drop.json", prune_drop_result({"arc_easy": {"acc": metric_drop(0.67, GATE_PRUNED)}})
    )
    (tmp_path / "gate.toml").write_text("[prune_drop]\nmax_drop = 0.05\nse_factor = 3\n")
    loose = cli(base, cand, "--rules", tmp_path / "gate.toml", "--format", "json", "--no-plot")
    assert loose.exit_code == 0, loose.output
    assert json.loads(loose.stdout)["rules"]["prune_drop"]["max_drop"] == {"value": 0.05, "source": "rules file"}
    strict = cli(base, cand, "--rules", tmp_path / "gate.toml", "--max-drop", "0.01", "--format", "json", "--no-plot")
    assert strict.exit_code == 1
    data = json.loads(strict.stdout)
    assert data["rules"]["prune_drop"]["max_drop"] == {"value": 0.01, "source": "flag"}
    assert data["rules"]["prune_drop"]["se_factor"] == {"value": 3.0, "source": "rules file"}


def test_cli_a_failed_plot_warns_without_changing_the_status_but_a_bad_junit_path_is_exit_two(tmp_path):
    base = write_result(tmp_path, "b/angular.json", angular_from_adjacent(GATE_ADJACENT))
    (tmp_path / "blocked").write_text("a file where the plot directory should be")
    result = cli(base, base, "--out", tmp_path / "blocked")
    assert result.exit_code == 0 and "warning: no plot" in result.stderr
    result = cli(base, base, "--no-plot", "--junit", tmp_path / "blocked" / "report.xml")
    assert result.exit_code == 2 and "Cannot write --junit" in result.stderr


def test_cli_directory_mode_and_plot_out(tmp_path):
    base, cand = write_run_dirs(
        tmp_path,
        {"angular.json": angular_from_adjacent(GATE_ADJACENT), "prune_drop.json": gate_baseline_prune()},
        {"angular.json": angular_from_adjacent(GATE_ADJACENT)},
    )
    result = cli(base, cand, "--format", "json", "--out", tmp_path / "plots")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["skipped"][0].startswith("prune_drop: only in the baseline")
    assert (tmp_path / "plots" / "compare.png").is_file()


@pytest.mark.parametrize(
    "case", ["missing file", "kinds differ", "unreadable json", "schema version", "no common kind"]
)
def test_cli_exit_two_on_bad_input(tmp_path, case):
    baseline, candidate = bad_compare_inputs(tmp_path)[case]
    result = cli(baseline, candidate, "--no-plot")
    assert result.exit_code == 2, result.output
    assert "error:" in result.stderr and result.stdout == ""


def test_cli_exit_two_on_unknown_rule_and_unknown_format(tmp_path):
    base = write_result(tmp_path, "b/angular.json", angular_from_adjacent(GATE_ADJACENT))
    (tmp_path / "gate.toml").write_text("[angular]\nlazy_treshold = 0.3\n")
    result = cli(base, base, "--rules", tmp_path / "gate.toml", "--no-plot")
    assert result.exit_code == 2 and "lazy_treshold" in result.stderr and "lazy_threshold" in result.stderr
    result = cli(base, base, "--format", "html", "--no-plot")
    flat = " ".join(re.sub("[│╭╮╰╯─]", " ", result.stderr).split())  # a real choice: Typer's usage box lists them
    assert result.exit_code == 2 and "'html' is not one of 'table', 'markdown', 'json'" in flat


def test_format_json_and_markdown_end_with_a_newline(tmp_path):
    base = write_json(tmp_path / "b.json", angular_from_adjacent([0.5, 0.4, 0.3]).to_dict())
    for fmt in ("json", "markdown"):
        result = invoke("compare", base, base, "--format", fmt, "--no-plot")
        assert result.exit_code == 0, result.output
        assert result.stdout.endswith("}\n" if fmt == "json" else "\n")


def test_cli_max_drop_upper_without_per_document_answers_is_exit_two_in_one_line(tmp_path):
    base = write_result(tmp_path, "b/prune_drop.json", gate_baseline_prune())
    cand = write_result(tmp_path, "c/prune_drop.json", gate_baseline_prune())
    assert cli(base, cand, "--no-plot").exit_code == 0  # the rule is off by default
    result = cli(base, cand, "--max-drop-upper", "0.02", "--no-plot")
    assert result.exit_code == 2
    assert "max_drop_upper needs both runs' per-document answers for arc_easy" in result.output
    assert "--log-samples" in result.output
