"""The summaries printed after a run: what they call most similar, and never an unmeasured pair."""

from __future__ import annotations

import io
from dataclasses import replace

import pytest
from factories import angular_from_walk, paired_arc_result
from rich.console import Console

from layerprobe.cli import summaries
from layerprobe.results import angular_summary

pytestmark = pytest.mark.usefixtures("no_leaked_figures")


def test_console_summary_never_calls_an_unmeasured_pair_most_similar(monkeypatch):
    result = angular_from_walk(4, seed=5, nan_cells=[(0, 1), (1, 2), (2, 3), (3, 4)], stderr=0.01)
    printed = {"out": io.StringIO(), "err": io.StringIO()}
    for name, stream in printed.items():
        monkeypatch.setattr(summaries, name, Console(file=stream, width=200))
    summaries.print_angular_summary(result)
    out, err = printed["out"].getvalue(), printed["err"].getvalue()
    assert "no adjacent pair could be measured" in out and "d = nan" not in out.lower()
    assert out.count("unmeasured") == 4
    assert "4 entries could not be measured" in err and "d(x^0, x^1)" in err

    result = angular_from_walk(6, seed=3, stderr=0.01)
    printed = {"out": io.StringIO(), "err": io.StringIO()}
    for name, stream in printed.items():
        monkeypatch.setattr(summaries, name, Console(file=stream, width=200))
    summaries.print_angular_summary(result)
    choice = angular_summary(result.distance, stderr=result.distance_stderr)["most_redundant"]["1"]
    line = next(line for line in printed["out"].getvalue().splitlines() if "most similar" in line)
    assert f"x^{choice['layer']} → x^{choice['layer'] + 1}" in line
    assert f"± {choice['stderr']:.4f}" in line
    assert ("a clear choice" in line) == choice["clear"] and ("not clear" in line) == (not choice["clear"])


def test_a_sequential_prune_drop_table_shows_the_anytime_interval_documents_and_stop(monkeypatch):
    result, metric = paired_arc_result()
    sequential = replace(
        metric,
        items=[20, 60, 400, 40],
        stop=["settled", "precision", "exhausted", "settled"],
        delta_cs95=[[-0.45, -0.15], [-0.07, 0.03], [-0.02, 0.1], [0.01, 0.2]],
    )
    result = replace(result, tasks={"arc": replace(result.tasks["arc"], metrics={"acc": sequential})})
    stream = io.StringIO()
    monkeypatch.setattr(summaries, "out", Console(file=stream, width=200))
    summaries.print_prune_summary(result)
    text = stream.getvalue()
    assert "anytime 95 % CI" in text and "documents" in text and "stop" in text
    assert "[-0.4500, -0.1500]" in text and "exhausted" in text and "[-0.40" not in text
    assert "sequential, anytime-valid 95 % CI" in text
