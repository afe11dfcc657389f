"""The ΔP bars: each layer's ΔP coloured by harm, or only when its paired interval excludes 0, with error
bars and the adjacent angular distance overlaid; safe, distinct file names; quantization in the title."""

from __future__ import annotations

import math
from dataclasses import replace

import matplotlib.pyplot as plt
import pytest
from drawn import PNG_MAGIC, delta_bars, file_magic
from factories import metric_drop, model_info, paired_arc_result, prune_drop_result, random_prune_result
from matplotlib.colors import to_rgba
from matplotlib.container import BarContainer, ErrorbarContainer

from layerprobe.plots.common import HARMFUL, HELPFUL, WITHIN_NOISE
from layerprobe.plots.delta import plot_prune_drop, prune_drop_figure
from layerprobe.results.rundir import figure_name


@pytest.mark.usefixtures("no_leaked_figures")
@pytest.mark.parametrize("higher_is_better", [True, False])
def test_prune_drop_bars_are_the_deltas_coloured_by_harm(higher_is_better):
    result = random_prune_result(12, higher_is_better=higher_is_better)
    metric = result.tasks["arc_easy"].metrics["acc"]  # the primary metric is the first one reported
    fig = prune_drop_figure(result, "arc_easy")
    try:
        ax = fig.axes[0]
        bars = delta_bars(ax)
        heights = [bar.get_height() for bar in bars]
        assert [bar.get_x() + bar.get_width() / 2 for bar in bars] == pytest.approx(metric.layers)
        assert heights == pytest.approx([d if math.isfinite(d) else 0.0 for d in metric.delta])
        harmful, helpful = 0, 0
        for bar, delta in zip(bars, metric.delta, strict=True):
            color = bar.get_facecolor()
            if not math.isfinite(delta) or abs(delta) < metric.baseline_stderr:
                continue
            hurts = delta < 0 if higher_is_better else delta > 0
            expected = HARMFUL if hurts else HELPFUL
            assert color == pytest.approx(to_rgba(expected))
            harmful, helpful = harmful + hurts, helpful + (not hurts)
        assert harmful and helpful
        errorbars = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
        segments = errorbars[0].lines[2][0].get_segments()
        with_stderr = [s is not None and math.isfinite(d) for s, d in zip(metric.stderr, metric.delta, strict=True)]
        assert len(segments) == sum(with_stderr)
        assert f"{metric.baseline:.4g} ± {metric.baseline_stderr:.2g}" in ax.get_title()
        assert "arc_easy" in ax.get_title() and "acc" in ax.get_title()
        band = [p for p in ax.patches if p.get_label() == "± baseline stderr"]
        assert len(band) == 1
        ys = band[0].get_path().transformed(band[0].get_patch_transform()).vertices[:, 1]
        assert (min(ys), max(ys)) == pytest.approx((-metric.baseline_stderr, metric.baseline_stderr))
    finally:
        plt.close(fig)


@pytest.mark.usefixtures("no_leaked_figures")
def test_prune_drop_file_names_are_safe_and_distinct(tmp_path):
    tasks = ("mmlu", "hendrycks/math algebra", "a/b", "a_b", "../../etc")
    paths = plot_prune_drop(random_prune_result(80, tasks=tasks), tmp_path)
    assert len(paths) == len(tasks) == len({p.name for p in paths})
    for path in paths:
        assert path.parent == tmp_path
        assert all(ch.isalnum() or ch in "._-" for ch in path.name), path.name
        assert file_magic(path, PNG_MAGIC)
    assert tmp_path / "prune_drop_hendrycks_math_algebra.png" in paths
    assert figure_name("mmlu/abstract algebra") == "mmlu_abstract_algebra"


@pytest.mark.parametrize("higher_is_better", [True, False])
def test_bars_are_coloured_only_when_the_paired_interval_excludes_zero(higher_is_better):
    result, metric = paired_arc_result(higher_is_better)
    fig = prune_drop_figure(result, "arc")
    try:
        ax = fig.axes[0]
        bars = next(c for c in ax.containers if isinstance(c, BarContainer) and len(c) > 1)
        worse, better = (HARMFUL, HELPFUL) if higher_is_better else (HELPFUL, HARMFUL)
        expected = [worse, WITHIN_NOISE, WITHIN_NOISE, better]
        assert [bar.get_facecolor() for bar in bars] == [pytest.approx(to_rgba(c)) for c in expected]
        # Error bars span exactly the paired intervals (asymmetric), not ± the pruned scores' stderr.
        errorbar = next(c for c in ax.containers if isinstance(c, ErrorbarContainer) and c.lines[2])
        spans = sorted((float(s[0][1]), float(s[1][1])) for s in errorbar.lines[2][0].get_segments())
        assert spans == [pytest.approx(tuple(i)) for i in sorted(map(tuple, metric.delta_ci95))]
        labels = [t.get_text() for t in ax.get_legend().get_texts()]
        assert "not significant (95 % CI spans 0)" in labels and "paired 95 % CI of ΔP" in labels
        assert not [p for p in ax.patches if p.get_label() == "± baseline stderr"]
        assert len(fig.axes) == 1  # no angular result, no second axis
    finally:
        plt.close(fig)


def test_adjacent_distance_is_overlaid_on_a_second_axis():
    result, _ = paired_arc_result(agreement=True)
    fig = prune_drop_figure(result, "arc")
    try:
        assert len(fig.axes) == 2
        line = fig.axes[1].get_lines()[0]
        assert list(line.get_xdata()) == [0, 1, 2, 3] and list(line.get_ydata()) == [0.4, 0.1, 0.2, 0.3]
        assert any("Spearman" in t.get_text() for t in fig.axes[1].texts)
    finally:
        plt.close(fig)


def test_prune_drop_figure_title_marks_quantization():
    drop = {"lp_arc_like": {"acc": metric_drop(0.5, [0.4, 0.45], stderr=0.1, baseline_stderr=0.1)}}
    plain = prune_drop_result(drop, limit=None, model=model_info(2), engine="shared")
    labelled = prune_drop_result(
        drop, limit=None, model=model_info(2, quantization="bitsandbytes-8bit"), engine="shared"
    )
    assert "bitsandbytes-8bit" in prune_drop_figure(labelled, "lp_arc_like").axes[0].get_title()
    assert "bitsandbytes" not in prune_drop_figure(plain, "lp_arc_like").axes[0].get_title()


def test_a_sequential_runs_error_bars_are_its_anytime_intervals():
    result, metric = paired_arc_result()
    anytime = [[d - 0.2, d + 0.1] for d in metric.delta]
    sequential = replace(metric, items=[10] * 4, stop=["settled"] * 4, delta_cs95=anytime)
    fig = prune_drop_figure(
        replace(result, tasks={"arc": replace(result.tasks["arc"], metrics={"acc": sequential})}), "arc"
    )
    try:
        ax = fig.axes[0]
        errorbar = next(c for c in ax.containers if isinstance(c, ErrorbarContainer) and c.lines[2])
        spans = sorted((float(s[0][1]), float(s[1][1])) for s in errorbar.lines[2][0].get_segments())
        assert spans == [pytest.approx(tuple(i)) for i in sorted(map(tuple, anytime))]
        assert "anytime-valid 95 % CI of ΔP (sequential)" in [t.get_text() for t in ax.get_legend().get_texts()]
    finally:
        plt.close(fig)
