"""The ΔP bars: each layer's ΔP coloured by harm, or only when its paired interval excludes 0, with error
bars and the adjacent angular distance overlaid; safe, distinct file names; quantization in the title."""

from __future__ import annotations

import math
from dataclasses import replace

import matplotlib.pyplot as plt
import pytest
from drawn import (
    PDF_MAGIC,
    PNG_MAGIC,
    band_limits,
    delta_bars,
    errorbar_spans,
    file_magic,
    legend_texts,
    overlapping_texts,
    points_under_legend,
)
from factories import (
    corpus_prune_result,
    metric_drop,
    model_info,
    paired_arc_result,
    prune_drop_result,
    random_prune_result,
)
from matplotlib.colors import to_rgba
from matplotlib.container import BarContainer, ErrorbarContainer

from layerprobe.plots.common import HARMFUL, HELPFUL, WITHIN_NOISE
from layerprobe.plots.delta import BASELINE_BAND, plot_prune_drop, prune_drop_figure
from layerprobe.results import FlipRate
from layerprobe.results.rundir import figure_name
from layerprobe.stats import wilson_interval


@pytest.mark.usefixtures("no_leaked_figures")
@pytest.mark.parametrize("higher_is_better", [True, False])
def test_prune_drop_bars_are_the_deltas_coloured_by_harm(higher_is_better):
    result = random_prune_result(12, higher_is_better=higher_is_better)
    # 1250 right of 2500 documents: a band of about ±0.02 (the factory records a stderr of 0.02)
    result = replace(result, tasks={**result.tasks, "arc_easy": replace(result.tasks["arc_easy"], samples=2500)})
    metric = result.tasks["arc_easy"].metrics["acc"]  # the primary metric is the first one reported
    fig = prune_drop_figure(result, "arc_easy")
    try:
        ax = fig.axes[0]
        bars = delta_bars(ax)
        heights = [bar.get_height() for bar in bars]
        assert [bar.get_x() + bar.get_width() / 2 for bar in bars] == pytest.approx(metric.layers)
        assert heights == pytest.approx([d if math.isfinite(d) else 0.0 for d in metric.delta])
        harmful, helpful = 0, 0
        z = 1.959963984540054  # the two-sided 95 % normal quantile
        n = result.tasks["arc_easy"].samples
        wilson = wilson_interval(round(metric.baseline * n), n)
        band = (wilson[0] - metric.baseline, wilson[1] - metric.baseline)  # the title's interval, moved to 0
        for bar, delta in zip(bars, metric.delta, strict=True):
            color = bar.get_facecolor()
            if not math.isfinite(delta) or band[0] < delta < band[1]:
                assert not math.isfinite(delta) or color == pytest.approx(to_rgba(WITHIN_NOISE))
                continue
            hurts = delta < 0 if higher_is_better else delta > 0
            expected = HARMFUL if hurts else HELPFUL
            assert color == pytest.approx(to_rgba(expected))
            harmful, helpful = harmful + hurts, helpful + (not hurts)
        assert harmful and helpful
        # Every error bar is the pruned score's 95 % interval, ΔP ± 1.96 stderr, and the legend says so.
        expected_spans = [
            (d - z * s, d + z * s)
            for d, s in zip(metric.delta, metric.stderr, strict=True)
            if s is not None and math.isfinite(d)
        ]
        assert errorbar_spans(ax) == [pytest.approx(span) for span in expected_spans]
        assert "95 % CI of the pruned score (± 1.96 stderr)" in legend_texts(ax)
        # An accuracy's baseline is k right of n: Wilson's interval, as the terminal prints it.
        n = result.tasks["arc_easy"].samples
        low, high = wilson_interval(round(metric.baseline * n), n)
        assert f"{metric.baseline:#.4g} (95 % CI [{low:#.4g}, {high:#.4g}])" in ax.get_title()
        assert "arc_easy · accuracy" in ax.get_title()
        # One quantity, one interval: the shaded band is the title's Wilson interval, not ± 1.96 stderr.
        assert band_limits(ax, BASELINE_BAND) == pytest.approx(band)
    finally:
        plt.close(fig)


@pytest.mark.usefixtures("no_leaked_figures")
@pytest.mark.slow  # over 3 s on 2 cores: the default tier stays under 3 minutes
def test_prune_drop_file_names_are_safe_and_distinct(tmp_path):
    tasks = ("mmlu", "hendrycks/math algebra", "a/b", "a_b", "../../etc")
    paths = plot_prune_drop(random_prune_result(80, tasks=tasks), tmp_path)
    assert len(paths) == 2 * len(tasks) == len({p.name for p in paths})
    for path in paths:
        assert path.parent == tmp_path
        assert all(ch.isalnum() or ch in "._-" for ch in path.name), path.name
        assert file_magic(path, PNG_MAGIC if path.suffix == ".png" else PDF_MAGIC)
    assert {p.with_suffix("") for p in paths if p.suffix == ".pdf"} == {p.with_suffix("") for p in paths}
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
        assert not [p for p in ax.patches if "baseline" in str(p.get_label())]
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
        assert "Spearman ρ(d, ΔP)" in fig.axes[0].get_xlabel()  # under the axis, where no bar or point can be
        assert not fig.axes[0].texts and not fig.axes[1].texts
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


@pytest.mark.usefixtures("no_leaked_figures")
def test_the_corpus_task_plots_kl_and_top1_agreement_beside_nll():
    result = corpus_prune_result()
    metrics = result.tasks["corpus"].metrics
    fig = prune_drop_figure(result, "corpus")
    try:
        main, kl_ax, top1_ax = fig.axes
        assert "NLL (nats per token)" in main.get_title()
        for ax, name in ((kl_ax, "KL divergence"), (top1_ax, "top-1 agreement")):
            metric = metrics["kl" if name.startswith("KL") else "top1_agreement"]
            assert [b.get_height() for b in delta_bars(ax)] == pytest.approx(metric.pruned)
            expected = [(metric.baseline + lo, metric.baseline + hi) for lo, hi in metric.delta_ci95]
            assert errorbar_spans(ax) == [pytest.approx(span) for span in expected]
            assert "paired 95 % CI" in legend_texts(ax) and name in ax.get_title(loc="left")
        assert "KL" in kl_ax.get_ylabel() and "top-1" in top1_ax.get_ylabel()
    finally:
        plt.close(fig)
    other = prune_drop_figure(random_prune_result(4), "arc_easy")
    try:
        assert len(other.axes) == 1  # only the corpus metrics have companions
    finally:
        plt.close(other)


def test_a_generating_task_gets_a_panel_of_flip_rates_per_filter_with_their_intervals():
    result = random_prune_result(4)
    rates = {
        "strict-match": FlipRate(
            [0, 1, 2, 3], [0, 2, 5, 1], 10, [0.0, 0.2, 0.5, 0.1], [[0.0, 0.28], [0.06, 0.51], [0.24, 0.76], [0.02, 0.4]]
        ),
        "flexible-extract": FlipRate([0, 1, 2, 3], [1, 1, 1, 1], 10, [0.1] * 4, [[0.02, 0.4]] * 4),
    }
    task = replace(result.tasks["arc_easy"], flip_rate=rates)
    fig = prune_drop_figure(replace(result, tasks={"arc_easy": task}), "arc_easy")
    try:
        lower = fig.axes[1]
        containers = [c for c in lower.containers if isinstance(c, ErrorbarContainer)]
        assert [c.get_label() for c in containers] == ["strict-match", "flexible-extract"]
        ys = list(containers[0].lines[0].get_ydata())
        assert ys == pytest.approx(rates["strict-match"].rate)
        segments = containers[0].lines[2][0].get_segments()  # the vertical error bars: the Wilson intervals
        got = [v for s in segments for v in (s[0][1], s[1][1])]
        assert got == pytest.approx([v for c in rates["strict-match"].ci95 for v in c])
    finally:
        plt.close(fig)


@pytest.mark.slow  # over 2.5 s on 2 cores: the default tier stays under 3 minutes
def test_the_flip_rate_legend_covers_no_point_wherever_the_rates_lie():
    result = random_prune_result(8)
    layers = list(range(8))
    corners = {  # intervals from the bottom and the top of the panel, as in the README's example
        "strict-match": FlipRate(layers, [0] * 8, 10, [0.0] * 8, [[0.0, 0.28]] * 8),
        "flexible-extract": FlipRate(layers, [7] * 8, 10, [0.7] * 8, [[0.4, 0.89]] * 8),
    }
    task = replace(result.tasks["arc_easy"], flip_rate=corners)
    fig = prune_drop_figure(replace(result, tasks={"arc_easy": task}), "arc_easy")
    try:
        lower = fig.axes[1]
        assert "filter (Wilson 95 %)" == lower.get_legend().get_title().get_text()
        assert points_under_legend(lower) == []
        assert overlapping_texts(fig) == []
    finally:
        plt.close(fig)


@pytest.mark.usefixtures("no_leaked_figures")
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


@pytest.mark.parametrize(
    "figure",
    [
        lambda: prune_drop_figure(corpus_prune_result(), "corpus"),
        lambda: prune_drop_figure(paired_arc_result(agreement=True)[0], "arc"),
        lambda: prune_drop_figure(random_prune_result(12), "arc_easy"),
        lambda: prune_drop_figure(random_prune_result(80), "arc_easy"),
    ],
    ids=["corpus", "agreement", "12-blocks", "80-blocks"],
)
def test_no_two_labels_of_a_prune_drop_figure_overlap(figure):
    fig = figure()
    try:
        assert overlapping_texts(fig) == []
        fig.text(0.5, 0.5, "a label drawn over another")  # the check can fail: two texts in one place
        fig.text(0.5, 0.5, "another label drawn there")
        assert overlapping_texts(fig) == [("a label drawn over another", "another label drawn there")]
    finally:
        plt.close(fig)
