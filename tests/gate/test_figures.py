"""The gate's figures: baseline and candidate side by side, drawn from the results' own numbers."""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import numpy as np
import pytest
from drawn import (
    PDF_MAGIC,
    PNG_MAGIC,
    assert_drawn_matrix,
    band_limits,
    delta_bars,
    errorbar_spans,
    expected_cells,
    expected_minima,
    file_magic,
    legend_texts,
    marked_minima,
    overlapping_texts,
)
from factories import angular_from_walk, paired_arc_result, random_prune_result
from matplotlib.container import BarContainer

from layerprobe.core.errors import ResultError
from layerprobe.gate import figures
from layerprobe.gate.figures import plot_verdict
from layerprobe.gate.verdict import compare_paths
from layerprobe.plots import BASELINE_BAND
from layerprobe.stats import wilson_interval


@pytest.mark.slow  # over 3 s on 2 cores: the default tier stays under 3 minutes
def test_plots_are_written_next_to_the_candidate_or_in_out(tmp_path, mixed_verdict):
    paths = plot_verdict(mixed_verdict)
    assert sorted(p.name for p in paths) == [
        "compare_angular.pdf",
        "compare_angular.png",
        "compare_prune_drop.pdf",
        "compare_prune_drop.png",
    ]
    for path in paths:
        assert path.parent == tmp_path / "cand"
        assert file_magic(path, PNG_MAGIC if path.suffix == ".png" else PDF_MAGIC)
    single = compare_paths(tmp_path / "base" / "angular.json", tmp_path / "cand" / "angular.json")
    plots = tmp_path / "plots"
    assert plot_verdict(single, plots) == [plots / "compare.png", plots / "compare.pdf"]


@pytest.mark.usefixtures("no_leaked_figures")
@pytest.mark.parametrize(("base_layers", "cand_layers"), [(8, 5), (80, 60), (6, 6)])
@pytest.mark.slow  # over 3 s on 2 cores: the default tier stays under 3 minutes
def test_compare_angular_differences_over_the_common_layers(tmp_path, base_layers, cand_layers):
    baseline = angular_from_walk(base_layers, seed=1, model_id="org/base")
    candidate = angular_from_walk(cand_layers, seed=2, nan_cells=[(0, 1)], model_id="org/pruned")
    fig = figures.compare_angular_figure(baseline, candidate)
    try:
        heatmaps = [ax for ax in fig.axes if ax.images]
        assert len(heatmaps) == 3
        assert_drawn_matrix(
            heatmaps[0].images[0].get_array(), expected_cells(baseline.distance, base_layers), base_layers
        )
        assert_drawn_matrix(
            heatmaps[1].images[0].get_array(), expected_cells(candidate.distance, cand_layers), cand_layers
        )
        common = min(base_layers, cand_layers)
        diff = {
            (n, start): candidate.distance[start][start + n] - baseline.distance[start][start + n]
            for n in range(1, common + 1)
            for start in range(common - n + 1)
        }
        diff_image = heatmaps[2].images[0]
        assert_drawn_matrix(diff_image.get_array(), diff, common)
        low, high = diff_image.get_clim()
        assert low == -high and high >= max(abs(v) for v in diff.values() if math.isfinite(v))
        assert f"min L = {common}" in heatmaps[2].get_title()
        assert marked_minima(heatmaps[1]) == expected_minima(candidate.distance, cand_layers)
        assert marked_minima(heatmaps[2]) == {}
    finally:
        plt.close(fig)
    png, pdf = figures.plot_compare_angular(baseline, candidate, tmp_path / "compare.png")
    assert png == tmp_path / "compare.png" and file_magic(png, PNG_MAGIC) and file_magic(pdf, PDF_MAGIC)


@pytest.mark.slow  # over 2.5 s on 2 cores: the default tier stays under 3 minutes
@pytest.mark.usefixtures("no_leaked_figures")
def test_compare_prune_drop_with_a_pruned_candidate(tmp_path):
    baseline = random_prune_result(12, tasks=("arc_easy", "mmlu"), seed=0)
    candidate = random_prune_result(9, tasks=("mmlu", "piqa"), seed=5)
    fig = figures.compare_prune_drop_figure(baseline, candidate)
    try:
        assert len(fig.axes) == 2  # one row: mmlu is the only common task
        bars_ax, diff_ax = fig.axes
        grouped = [c for c in bars_ax.containers if isinstance(c, BarContainer)]
        base_metric = baseline.tasks["mmlu"].metrics["acc"]
        cand_metric = candidate.tasks["mmlu"].metrics["acc"]
        assert [b.get_height() for b in grouped[0]] == pytest.approx(np.nan_to_num(base_metric.delta))
        assert [b.get_height() for b in grouped[1]] == pytest.approx(np.nan_to_num(cand_metric.delta))
        expected = [c - b for b, c in zip(base_metric.delta[:9], cand_metric.delta, strict=True)]
        diff_bars = delta_bars(diff_ax)
        assert [b.get_x() + b.get_width() / 2 for b in diff_bars] == pytest.approx(range(9))
        assert [b.get_height() for b in diff_bars] == pytest.approx(np.nan_to_num(expected))
        assert "mmlu" in bars_ax.get_title()
    finally:
        plt.close(fig)
    png, pdf = figures.plot_compare_prune_drop(baseline, candidate, tmp_path / "compare.png")
    assert file_magic(png, PNG_MAGIC) and file_magic(pdf, PDF_MAGIC) and pdf == tmp_path / "compare.pdf"


@pytest.mark.usefixtures("no_leaked_figures")
def test_compare_prune_drop_without_a_common_task_is_a_user_error(tmp_path):
    with pytest.raises(ResultError, match="share no task"):
        figures.plot_compare_prune_drop(
            random_prune_result(4, ("a",)), random_prune_result(4, ("b",)), tmp_path / "c.png"
        )
    assert not (tmp_path / "c.png").exists() and not (tmp_path / "c.pdf").exists()


@pytest.mark.usefixtures("no_leaked_figures")
def test_compare_prune_drop_draws_95_percent_intervals_and_labels_them():
    z = 1.959963984540054
    baseline, base_metric = paired_arc_result()
    candidate = random_prune_result(4, tasks=("arc",), seed=3)  # unpaired: the pruned scores' own stderrs
    cand_metric = candidate.tasks["arc"].metrics["acc"]
    fig = figures.compare_prune_drop_figure(baseline, candidate)
    try:
        bars_ax, diff_ax = fig.axes
        spans = errorbar_spans(bars_ax)
        expected = [tuple(ci) for ci in base_metric.delta_ci95] + [
            (d - z * s, d + z * s)
            for d, s in zip(cand_metric.delta, cand_metric.stderr, strict=True)
            if s is not None and math.isfinite(d)
        ]
        assert spans == [pytest.approx(span) for span in expected]
        # One quantity, one interval: the band is the Wilson interval the title gives the baseline, moved to 0.
        n = baseline.tasks["arc"].samples
        wilson = wilson_interval(round(base_metric.baseline * n), n)
        assert f"[{wilson[0]:#.4g}, {wilson[1]:#.4g}]" in bars_ax.get_title()  # plots.common.number_text
        low, high = band_limits(bars_ax, BASELINE_BAND)
        assert (low, high) == pytest.approx((wilson[0] - base_metric.baseline, wilson[1] - base_metric.baseline))
        assert any("95 % CI" in text for text in legend_texts(bars_ax) if "baseline" not in text)
        assert not errorbar_spans(diff_ax)  # the candidate has no paired stderrs: no combined interval
    finally:
        plt.close(fig)
    both, _ = paired_arc_result()
    fig = figures.compare_prune_drop_figure(baseline, both)
    try:
        diff_ax = fig.axes[1]
        se = base_metric.delta_stderr
        assert errorbar_spans(diff_ax) == [pytest.approx((-z * math.hypot(s, s), z * math.hypot(s, s))) for s in se]
        assert "95 % CI: ± 1.96 √(se_base² + se_cand²)" in legend_texts(diff_ax)
    finally:
        plt.close(fig)


@pytest.mark.usefixtures("no_leaked_figures")
@pytest.mark.parametrize(
    "figure",
    [
        lambda: figures.compare_prune_drop_figure(
            random_prune_result(12, ("a", "b")), random_prune_result(9, ("a", "b"), seed=4)
        ),
        lambda: figures.compare_prune_drop_figure(paired_arc_result()[0], paired_arc_result()[0]),
        lambda: figures.compare_angular_figure(angular_from_walk(8, seed=1), angular_from_walk(5, seed=2)),
        lambda: figures.compare_angular_figure(angular_from_walk(32, seed=1), angular_from_walk(24, seed=2)),
    ],
    ids=["prune-drop", "prune-drop-paired", "angular-8", "angular-32"],
)
@pytest.mark.slow  # over 2.5 s on 2 cores: the default tier stays under 3 minutes
def test_no_two_labels_of_a_compare_figure_overlap(figure):
    fig = figure()
    try:
        assert overlapping_texts(fig) == []
    finally:
        plt.close(fig)
