"""Figures a reviewer accepts: no legend on data, metrics named in words, one number format in titles,
equal curves visible side by side, labelled log ticks where the curves lie, a heatmap title that says what."""

from __future__ import annotations

import re
from dataclasses import replace
from types import SimpleNamespace

import matplotlib.pyplot as plt
import numpy as np
import pytest
from drawn import drawn_texts, points_under_legend
from factories import corpus_prune_result, depth_dict, metric_drop, model_info, prune_drop_result

from layerprobe.gate.figures import compare_prune_drop_figure
from layerprobe.plots.common import METRIC_WORDS, hidden_data, metric_label, place_legend
from layerprobe.plots.delta import prune_drop_figure, value_text
from layerprobe.plots.depth import depth_figure
from layerprobe.plots.stability import _draw_curves
from layerprobe.prune.agreement import metric_agreement
from layerprobe.results import DepthResult, Spread

# Each figure is laid out several times to place its legend: seconds per test, so the slow tier.
pytestmark = [pytest.mark.usefixtures("no_leaked_figures"), pytest.mark.slow]


def _flat_wide(name: str = "exact_match,strict-match", layers: int = 8, half: float = 0.163):
    """The README's GSM case: every ΔP 0 with the same wide interval, so every cap sits at the same height."""
    return metric_drop(
        0.0,
        [0.0] * layers,
        stderr=0.0,
        baseline_stderr=0.0,
        delta_stderr=[half / 1.96] * layers,
        delta_ci95=[[-half, half]] * layers,
        significant=[False] * layers,
        delta_method="paired_mean",
    ), name


def _raw_keys_in(fig) -> list[str]:
    """Drawn texts that hold a metric key as it is stored (`top1_agreement`, `exact_match,strict-match`, `kl`)."""
    keys = [key for key in METRIC_WORDS if "_" in key] + ["exact_match,strict-match"]
    bare = re.compile(r"(?<![\w(])(kl|nll|acc|f1)(?![\w)])")  # a short key as a word of its own
    return [
        t.get_text() for t in drawn_texts(fig) if any(key in t.get_text() for key in keys) or bare.search(t.get_text())
    ]


def test_the_legend_hides_no_cap_when_every_interval_reaches_the_top():
    metric, name = _flat_wide()
    result = prune_drop_result({"lp_gsm_like": {name: metric}}, 8, limit=None, model=model_info(8))
    fig = prune_drop_figure(result, "lp_gsm_like")
    try:
        ax = fig.axes[0]
        assert points_under_legend(ax) == []
        assert hidden_data(ax.get_legend(), ax) == []
        # The caps are all still in view (the axes made room above them rather than cutting them off).
        low, high = ax.get_ylim()
        assert low < -0.163 and high > 0.163
    finally:
        plt.close(fig)


def test_the_legend_hides_no_point_of_the_distance_curve():
    """The distance rises to its largest value at the last block, where a legend in the upper right would sit."""
    deltas = [-0.30, -0.02, 0.04, 0.10, -0.05, 0.02, 0.01, 0.03]
    metric = metric_drop(0.5, [0.5 + d for d in deltas], paired_se=[0.02] * 8, hib=True)
    distances = [0.10, 0.12, 0.15, 0.2, 0.25, 0.3, 0.35, 0.45]
    block = {"acc": metric_agreement(distances, metric)}
    result = prune_drop_result({"arc": {"acc": metric}}, 8, limit=None, model=model_info(8), agreement=block)
    fig = prune_drop_figure(result, "arc")
    try:
        ax = fig.axes[0]
        twin = next(other for other in fig.axes if other is not ax and other.bbox.bounds == ax.bbox.bounds)
        legend_ax = ax if ax.get_legend() is not None else twin
        assert points_under_legend(legend_ax, ax, twin) == []
        last = twin.get_lines()[0].get_xydata()[-1]
        assert tuple(last) == pytest.approx((7, 0.45))
    finally:
        plt.close(fig)


def test_the_compare_legends_hide_no_cap():
    metric, name = _flat_wide()
    base = prune_drop_result({"lp_gsm_like": {name: metric}}, 8, limit=None, model=model_info(8))
    fig = compare_prune_drop_figure(base, base)
    try:
        bars_ax = fig.axes[0]
        assert points_under_legend(bars_ax) == []
        assert _raw_keys_in(fig) == []
        assert "exact match (strict-match filter)" in bars_ax.get_title()
    finally:
        plt.close(fig)


def test_place_legend_goes_outside_when_no_room_can_be_made():
    fig, ax = plt.subplots(figsize=(4, 3))
    try:
        grid = np.linspace(0, 1, 30)
        for y in grid:  # lines everywhere: no corner, and no headroom on a fixed range, is free
            ax.plot(grid, np.full_like(grid, y), color="0.5", label="_")
        ax.plot([0.5], [0.5], "o", label="a point")
        ax.set_autoscaley_on(False)
        legend = place_legend(ax, fontsize=8)
        assert hidden_data(legend, ax) == [] and points_under_legend(ax) == []
    finally:
        plt.close(fig)


def test_no_figure_labels_a_metric_by_its_raw_key():
    fig = prune_drop_figure(corpus_prune_result(), "corpus")
    try:
        assert _raw_keys_in(fig) == []
        titles = [ax.get_title(loc="left") for ax in fig.axes[1:]]
        assert titles == [
            "KL divergence of each pruned model from the full model",
            "top-1 agreement of each pruned model with the full model",
        ]
        assert "NLL (nats per token)" in fig.axes[0].get_title()
    finally:
        plt.close(fig)


@pytest.mark.parametrize(
    ("key", "words"),
    [
        ("acc", "accuracy"),
        ("exact_match,strict-match", "exact match (strict-match filter)"),
        ("exact_match,none", "exact match"),
        ("top1_agreement", "top-1 agreement with the full model"),
        ("bits_per_byte", "bits per byte"),
        ("my_metric", "my metric"),
    ],
)
def test_metric_label_uses_the_words_of_methods(key, words):
    assert metric_label(key) == words


def test_title_numbers_share_one_format():
    """Wilson's interval and the estimate all with 4 significant digits: never `[0.109, 0.52]`."""
    metric = metric_drop(0.3, [0.3], stderr=0.0, baseline_stderr=0.0458)
    text = value_text(metric, "acc", 100)
    numbers = re.findall(r"\d+\.\d+", text)
    assert len(numbers) == 3, text
    assert all(len(n.replace(".", "").lstrip("0")) == 4 for n in numbers), text
    assert value_text(metric_drop(2.0, [2.0], baseline_stderr=0.01), "nll").endswith("± 0.020 (95 % CI)")


def test_equal_overlap_curves_stay_apart():
    """Three pairs with the same overlap at every k: three distinct lines (offset, own marker and dashes)."""
    pairs = [
        SimpleNamespace(first=a, second=b, jaccard_lowest_k=[0.0, 0.33, 0.2, 0.33], jaccard_lowest_k_ci95=[[0, 1]] * 4)
        for a, b in ((0, 1), (0, 2), (1, 2))
    ]
    result = SimpleNamespace(
        ks=[1, 2, 3, 4],
        pairs=pairs,
        inputs=[SimpleNamespace(label=name) for name in ("a", "b", "c")],
        jaccard_chance=[0.1, 0.2, 0.3, 0.4],
    )
    fig, ax = plt.subplots()
    try:
        _draw_curves(ax, result)
        lines = ax.get_lines()[:3]
        paths = {tuple(map(tuple, line.get_xydata())) for line in lines}
        assert len(paths) == 3
        assert len({line.get_linestyle() for line in lines}) == 3 and len({line.get_marker() for line in lines}) == 3
        xs = np.array([line.get_xdata() for line in lines])
        assert (np.abs(xs - np.array(result.ks)) < 0.5).all()  # still read at their k
    finally:
        plt.close(fig)


def _depth_with_grad() -> DepthResult:
    base = DepthResult.from_dict(depth_dict())
    count = len(base.update.mean)
    mlp = list(np.geomspace(0.43, 3.2, count))
    attention = [0.4] * count

    def spread(values):
        return Spread(values, [0.5 * v for v in values], values, values, [8] * len(values))

    modules = [f"m{l}" for l in range(count)]
    sublayers = {
        "attention": {"modules": modules, "relative": spread(attention)},
        "mlp": {"modules": modules, "relative": spread(mlp)},
    }
    return replace(base, sublayers=sublayers)


def test_log_panels_label_ticks_where_the_curves_lie_and_footnotes_sit_under_the_axis():
    result = _depth_with_grad()
    fig = depth_figure(result)
    try:
        sub = next(ax for ax in fig.axes if ax.get_title(loc="left").startswith("(c)"))
        grad = next(ax for ax in fig.axes if ax.get_title(loc="left").startswith("(d)"))
        mlp = result.sublayers["mlp"]["relative"].mean
        labelled = [
            t.get_position()[1]
            for t in sub.yaxis.get_ticklabels()
            if t.get_text() and min(mlp) <= t.get_position()[1] <= max(mlp)
        ]
        assert len(labelled) >= 3, labelled  # 0.5, 1, 2 inside [0.43, 3.2]
        if result.grad is not None:
            assert len(grad.texts) == 0 and "gradient of the mean" in grad.get_xlabel()
        for ax in (sub, grad):
            if ax.get_legend() is not None:
                assert points_under_legend(ax) == []
    finally:
        plt.close(fig)


def test_the_heatmap_title_says_what_it_shows(tmp_path):
    from factories import angular_from_adjacent

    from layerprobe.plots.heatmap import angular_figure

    fig = angular_figure(angular_from_adjacent([0.2, 0.1, 0.3]))
    try:
        title = fig.axes[0].get_title()
        assert title.startswith("angular distance $d(x^l")
        assert "between the inputs of blocks l and l+n" in title
        assert "positions=" not in title
    finally:
        plt.close(fig)
