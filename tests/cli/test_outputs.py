"""What layerprobe prints and leaves on disk: whole lines in pipes and logs, text that rich must not eat,
compare's change column with its direction, notes on runs that measured different things, no stale temp files."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from typer.testing import CliRunner

from layerprobe.cli.app import app
from layerprobe.gate import GateRules
from layerprobe.gate.render import render_markdown, render_table, verdict_to_dict
from layerprobe.gate.verdict import Verdict, compare_results
from layerprobe.results import (
    AngularResult,
    MetricDrop,
    ModelInfo,
    PruneDropResult,
    RunInfo,
    TaskDrop,
    write_json,
)
from layerprobe.results.io import remove_stale_temp_files

ROOT = Path(__file__).resolve().parents[2]
RUN = RunInfo(started_at="2025-01-01T00:00:00+00:00", seconds=1.0, versions={"layerprobe": "0"}, device="cpu")
runner = CliRunner()


def model(num_layers: int = 3) -> ModelInfo:
    return ModelInfo("org/m", None, None, "X", "x", "causal-lm", "float32", num_layers, "layers", "Block")


def angular(adjacent: list[float], **data) -> AngularResult:
    size = len(adjacent) + 1
    distance = [[min(1.0, sum(adjacent[min(i, j) : max(i, j)])) for j in range(size)] for i in range(size)]
    info = {"dataset": "builtin:pydoc", "tokens": 4096, "positions": "all", **data}
    return AngularResult(model(len(adjacent)), info, distance, 0, RUN, 1.0)


def prune(baseline: float, version: str | None = "1.0", limit=None, num_fewshot=0) -> PruneDropResult:
    metric = MetricDrop(baseline, 0.01, True, [0, 1, 2], [baseline - 0.1] * 3, [0.01] * 3)
    task = TaskDrop({"acc": metric}, num_fewshot, limit, 100, version=version)
    return PruneDropResult(model(), "simple", {"seed": 1234}, {"arc": task}, RUN)


def verdict(*comparisons) -> Verdict:
    return Verdict(Path("b"), Path("c"), GateRules(), list(comparisons), [])


# --- compare: the change is candidate − baseline, with the direction that is worse ------------------


def test_change_column_is_candidate_minus_baseline_with_the_worse_direction():
    fell = compare_results(angular([0.5, 0.4, 0.3]), angular([0.5, 0.1, 0.1]), GateRules())
    lazy, mean = fell.results
    assert (lazy.difference, lazy.worse_if) == (2, "higher")
    assert mean.worse_if == "lower" and mean.difference < 0 and mean.change > 0  # change stays "how much worse"
    score = compare_results(prune(0.70), prune(0.65), GateRules()).results[0]
    assert score.worse_if == "lower" and round(score.difference, 9) == -0.05
    table = render_table(verdict(fell))
    header = next(line for line in table.splitlines() if "criterion" in line)
    assert "change (cand − base)" in header and "worse if" in header and "allowed change" in header
    row = next(line for line in table.splitlines() if "mean_adjacent" in line)
    assert "-0.1667" in row and "lower" in row and "≥ -0.0200" in row
    lazy_row = next(line for line in table.splitlines() if "lazy_blocks" in line)
    assert "+2" in lazy_row and "higher" in lazy_row and "≤ +0" in lazy_row
    markdown = render_markdown(verdict(fell))
    assert "| change (cand − base) | worse if | allowed change |" in markdown
    entry = verdict_to_dict(verdict(fell))["comparisons"][0]["results"][1]
    assert entry["worse_if"] == "lower" and entry["difference"] == mean.difference and entry["change"] == mean.change


def test_notes_say_when_the_runs_measured_different_things():
    notes = compare_results(
        angular([0.5, 0.4, 0.3]), angular([0.5, 0.4, 0.3], tokens=512, positions="last"), GateRules()
    )
    assert "data.tokens differs: baseline 4096, candidate 512" in notes.notes
    assert "data.positions differs: baseline 'all', candidate 'last'" in notes.notes
    pd = compare_results(prune(0.7), prune(0.7, version="2.0", limit=20.0, num_fewshot=5), GateRules()).notes
    assert "arc: version differs: baseline '1.0', candidate '2.0'" in pd
    assert "arc: limit differs: baseline None, candidate 20.0" in pd
    assert "arc: num_fewshot differs: baseline 0, candidate 5" in pd
    unknown = compare_results(prune(0.7), prune(0.7, version=None), GateRules()).notes
    assert not [note for note in unknown if "version" in note]  # an unknown version is not a change


def test_task_version_is_read_from_lm_eval_results():
    from layerprobe.evaluate.harness import task_scores

    results = {"results": {"t": {"acc,none": 0.5, "sample_len": 3}}, "versions": {"t": 1.0}}
    assert task_scores(results, {}, "t").version == "1.0"
    assert task_scores({**results, "versions": {"t": "N/A"}}, {}, "t").version is None


def test_format_json_and_markdown_end_with_a_newline(tmp_path):
    base = write_json(tmp_path / "b.json", angular([0.5, 0.4, 0.3]).to_dict())
    for fmt in ("json", "markdown"):
        result = runner.invoke(app, ["compare", str(base), str(base), "--format", fmt, "--no-plot"])
        assert result.exit_code == 0, result.output
        assert result.stdout.endswith("}\n" if fmt == "json" else "\n")


# --- rich markup never eats text -----------------------------------------------------------------------


def test_bracketed_text_in_errors_survives(tmp_path):
    rules = tmp_path / "gate.toml"
    rules.write_text("[angular]\nlazy_treshold = 0.3\n")
    base = write_json(tmp_path / "b.json", angular([0.5, 0.4, 0.3]).to_dict())
    result = runner.invoke(app, ["compare", str(base), str(base), "--rules", str(rules)])
    assert result.exit_code == 2
    assert "Unknown rule 'lazy_treshold' in [angular] of rules file" in " ".join(result.stderr.split())


def test_console_summaries_escape_names(capsys):
    from layerprobe.cli.summaries import print_prune_summary

    result = prune(0.7)
    result = PruneDropResult(model(), "simple", {}, {"[bold]arc[/]": result.tasks["arc"]}, RUN)
    print_prune_summary(result)
    assert "[bold]arc[/]" in capsys.readouterr().out


# --- pipes and CI logs: nothing hard-wrapped at 80 columns ----------------------------------------------


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "80", "TERM": "dumb"}  # as some CI runners export
    return subprocess.run(
        [sys.executable, "-m", "layerprobe", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def test_piped_output_is_never_wrapped(tmp_path):
    deep = tmp_path / ("a-rather-long-directory-name-for-a-ci-workspace-" * 2) / "candidate-run"
    base = write_json(deep / "base" / "angular.json", angular([0.5, 0.4, 0.3]).to_dict())
    cand = write_json(deep / "cand" / "angular.json", angular([0.5, 0.1, 0.1]).to_dict())
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


# --- temp files of a killed writer ---------------------------------------------------------------------


def test_temp_files_of_a_killed_writer_are_removed_by_the_next_write(tmp_path):
    script = textwrap.dedent(
        f"""
        import time
        from pathlib import Path
        from layerprobe.results import atomic_write

        def slow(tmp):
            tmp.write_text("half")
            print("writing", flush=True)
            time.sleep(60)

        atomic_write(Path({str(tmp_path)!r}) / "angular.json", slow)
        """
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    writer = subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, text=True)
    assert writer.stdout.readline().strip() == "writing"
    live = [p.name for p in tmp_path.iterdir()]
    assert len(live) == 1 and live[0].startswith(".angular.json.") and live[0].endswith(".tmp")
    assert remove_stale_temp_files(tmp_path) == []  # held by a live writer: kept
    writer.send_signal(signal.SIGKILL)
    writer.wait(timeout=30)
    assert (tmp_path / live[0]).exists()  # no finally ran: SIGKILL leaves it
    old_style = tmp_path / ".prune_drop.json.0a1b2c3d.tmp"  # an earlier version's name, from before this process
    old_style.write_text("x")
    os.utime(old_style, (time.time() - 3600, time.time() - 3600))
    unrelated = tmp_path / ".notes.tmp"
    unrelated.write_text("mine")
    import layerprobe.results.io as results

    results._CLEANED.discard(tmp_path.resolve())
    write_json(tmp_path / "angular.json", {"schema": "x"})
    assert sorted(p.name for p in tmp_path.iterdir()) == [".notes.tmp", "angular.json"]
