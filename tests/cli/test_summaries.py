"""The summaries printed after a run: what they call most similar, and never an unmeasured pair."""

from __future__ import annotations

import io
import math
from dataclasses import replace

import pytest
from factories import (
    angular_from_walk,
    corpus_prune_result,
    curve_result,
    curve_result_sequential,
    curve_result_with_flips,
    paired_arc_result,
)
from rich.console import Console

from layerprobe.cli import summaries
from layerprobe.results import angular_summary

pytestmark = pytest.mark.usefixtures("no_leaked_figures")


def summary_text(monkeypatch, print_summary, result, width: int) -> str:
    """What `print_summary(result)` writes on a console `width` characters wide."""
    stream = io.StringIO()
    monkeypatch.setattr(summaries, "out", Console(file=stream, width=width))
    print_summary(result)
    return stream.getvalue()


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
    z = 1.959963984540054
    low, high = choice["distance"] - z * choice["stderr"], choice["distance"] + z * choice["stderr"]
    assert f"95 % CI [{low:.4f}, {high:.4f}]" in line and "±" not in printed["out"].getvalue()
    rows = [row for row in printed["out"].getvalue().splitlines() if "95 % CI" in row]
    assert rows  # the table's interval column is labelled as the 95 % CI
    assert ("a clear choice" in line) == choice["clear"] and ("not clear" in line) == (not choice["clear"])


def test_prune_summary_prints_the_baseline_with_its_95_percent_interval(monkeypatch):
    result, metric = paired_arc_result()  # as an F1 (not a share of 0/1 answers): value ± 1.96 stderr
    result = replace(result, tasks={"arc": replace(result.tasks["arc"], metrics={"f1": metric})})
    text = summary_text(monkeypatch, summaries.print_prune_summary, result, width=200)
    z = 1.959963984540054
    low, high = metric.baseline - z * metric.baseline_stderr, metric.baseline + z * metric.baseline_stderr
    assert f"baseline {metric.baseline:.4f} (95 % CI [{low:.4f}, {high:.4f}])" in text and "±" not in text


def test_the_corpus_task_prints_kl_and_top1_agreement_beside_nll(monkeypatch):
    result = corpus_prune_result()
    lines = summary_text(monkeypatch, summaries.print_prune_summary, result, width=250).splitlines()
    header = next(line for line in lines if "KL(base ‖ pruned)" in line)
    assert "top-1 agreement" in header and "nll" in header
    kl, top1 = result.tasks["corpus"].metrics["kl"], result.tasks["corpus"].metrics["top1_agreement"]
    for i, layer in enumerate(kl.layers):
        row = next(line for line in lines if line.strip("│ ").startswith(f"{layer} ") and "│" in line)
        lo, hi = kl.delta_ci95[i]
        assert f"{kl.pruned[i]:.4f} [{kl.baseline + lo:.4f}, {kl.baseline + hi:.4f}]" in row
        lo, hi = top1.delta_ci95[i]
        assert f"{top1.pruned[i]:.4f} [{top1.baseline + lo:.4f}, {top1.baseline + hi:.4f}]" in row


def test_a_sequential_prune_drop_table_shows_the_anytime_interval_documents_and_stop(monkeypatch):
    result, metric = paired_arc_result()
    sequential = replace(
        metric,
        items=[20, 60, 400, 40],
        stop=["settled", "precision", "exhausted", "settled"],
        delta_cs95=[[-0.45, -0.15], [-0.07, 0.03], [-0.02, 0.1], [0.01, 0.2]],
    )
    result = replace(result, tasks={"arc": replace(result.tasks["arc"], metrics={"acc": sequential})})
    text = summary_text(monkeypatch, summaries.print_prune_summary, result, width=200)
    assert "anytime 95 % CI" in text and "documents" in text and "stop" in text
    assert "[-0.4500, -0.1500]" in text and "exhausted" in text and "[-0.40" not in text
    assert "sequential, anytime-valid 95 % CI" in text


def test_the_curve_table_shows_each_sets_answers_changed_per_filter_with_its_interval(monkeypatch):
    result = curve_result_with_flips()
    lines = summary_text(monkeypatch, summaries.print_curve_summary, result, width=250).splitlines()
    header = next(line for line in lines if "method" in line)
    assert "answers changed (strict-match)" in header and "answers changed (flexible-extract)" in header
    rows = [[cell.strip() for cell in line.split("│")[1:-1]] for line in lines if "│" in line and "method" not in line]
    for method, strategy in result.methods.items():
        for n, chosen in strategy.sets.items():
            flips = chosen.flip_rate["corpus"]
            cells = [f"{f.rate:.2f} [{f.ci95[0]:.2f}, {f.ci95[1]:.2f}]" for f in flips.values()]
            assert [method, str(n), *cells] in [[*r[:2], *r[-2:]] for r in rows], rows
    plain = io.StringIO()  # no generating task: no such column
    monkeypatch.setattr(summaries, "out", Console(file=plain, width=250))
    summaries.print_curve_summary(curve_result())
    assert "method" in plain.getvalue() and "answers changed" not in plain.getvalue()


def test_a_sequential_curve_table_shows_each_sets_anytime_interval_documents_and_stop(monkeypatch):
    result = curve_result_sequential()
    text = summary_text(monkeypatch, summaries.print_curve_summary, result, width=250)
    assert "on 12 documents" in text and "anytime 95 % CI" in text and "paired 95 % CI" not in text
    rows = [[cell.strip() for cell in line.split("│")[1:-1]] for line in text.splitlines() if "│" in line]
    for method, strategy in result.methods.items():
        for n, chosen in strategy.sets.items():
            score = chosen.scores["corpus"]["nll"]
            low, high = score.delta_cs95
            want = [method, str(n), f"[{low:+.4f}, {high:+.4f}]", str(score.items), score.stop]
            assert want in [[*r[:2], *r[-3:]] for r in rows], rows


def test_an_accuracy_baseline_gets_wilsons_interval_which_stays_inside_0_and_1(monkeypatch):
    result, metric = paired_arc_result()
    few = replace(metric, baseline=0.2, baseline_stderr=math.sqrt(0.2 * 0.8 / 14))  # 3 of 15 right
    result = replace(result, tasks={"arc": replace(result.tasks["arc"], metrics={"acc": few}, samples=15)})
    text = summary_text(monkeypatch, summaries.print_prune_summary, result, width=200)
    z2 = 1.959963984540054**2
    centre, half = (3 + z2 / 2) / (15 + z2), 1.959963984540054 * math.sqrt(3 * 12 / 15 + z2 / 4) / (15 + z2)
    assert f"baseline 0.2000 (95 % CI [{centre - half:.4f}, {centre + half:.4f}])" in text
    assert centre - half > 0  # ± 1.96 SE would say [-0.0095, 0.4095]
