"""The pruning-curve figure: each method under its reader's name, the 95 % bands said, no label overlapping."""

from __future__ import annotations

import pytest
from factories import curve_result, curve_result_sequential, curve_result_with_flips

from layerprobe.plots import plot_prune_curve, prune_curve_figure
from layerprobe.results import CurveStrategy, PruneCurveResult, RemovedSet, SetScore


def with_random(result: PruneCurveResult) -> PruneCurveResult:
    """The factory's curve plus one random draw (seed 1234) whose every interval is known."""
    scores = {"corpus": {"nll": SetScore(3.3, 0.1, [3.1, 3.5], 0.3, 0.05, [0.2, 0.4])}}
    draw = CurveStrategy("block", {1: RemovedSet([0], [], scores)})
    methods = {**result.methods, "random_1234": draw}
    return PruneCurveResult(result.model, result.settings, result.selection, result.baseline, methods, result.run)


def test_legend_names_each_method_and_the_95_interval_outside_the_axes():
    fig = prune_curve_figure(with_random(curve_result()), "corpus")
    fig.canvas.draw()
    [legend] = fig.legends
    labels = [t.get_text() for t in legend.get_texts()]
    assert labels[:2] == ["full model", "full model 95 %"]
    assert {"angular", "last", "random (seed 1234)"} <= set(labels) and "random_1234" not in labels
    assert "95 % (paired ΔP)" in labels
    renderer = fig.canvas.get_renderer()
    [ax] = fig.axes
    legend_box = legend.get_window_extent(renderer)
    others = [ax.get_window_extent(renderer), ax.title.get_window_extent(renderer)]
    others += [ax.xaxis.label.get_window_extent(renderer), ax.yaxis.label.get_window_extent(renderer)]
    assert not any(legend_box.overlaps(box) for box in others)  # the legend covers no curve and no label
    ticks = [t.get_window_extent(renderer) for t in ax.get_xticklabels() if t.get_text()]
    assert all(not a.overlaps(b) for i, a in enumerate(ticks) for b in ticks[i + 1 :])


def test_the_band_is_the_paired_95_interval_around_the_full_model(tmp_path):
    result = with_random(curve_result())
    fig = prune_curve_figure(result, "corpus")
    [ax] = fig.axes
    bands = [c for c in ax.collections if c.get_paths()]
    random_band = bands[-1].get_paths()[0].vertices[:, 1]  # the random draw's: one point, [0.2, 0.4] + 3.0
    assert min(random_band) == pytest.approx(3.2) and max(random_band) == pytest.approx(3.4)
    paths = plot_prune_curve(result, tmp_path)
    assert [p.name for p in paths] == ["prune_curve_corpus.png", "prune_curve_corpus.pdf"]
    assert paths[1].read_bytes()[:4] == b"%PDF"


def test_a_generating_task_gets_a_panel_of_answers_changed_per_method_and_filter():
    result = curve_result_with_flips()
    fig = prune_curve_figure(result, "corpus")
    fig.canvas.draw()
    upper, lower = fig.axes
    assert "answers changed" in lower.get_ylabel() and "Wilson 95 %" in lower.get_ylabel()
    assert lower.get_xlabel().startswith("fraction of blocks removed") and upper.get_xlabel() == ""
    drawn = [(list(line.get_xdata()), list(line.get_ydata()), line.get_linestyle()) for line in lower.get_lines()]
    half_unit = 1 / (2 * result.num_layers) / 2
    for k, strategy in enumerate(result.methods.values()):  # methods in order, each: strict (solid), flexible (dashed)
        for f, (name, style) in enumerate((("strict-match", "-"), ("flexible-extract", "--"))):
            rates = [strategy.sets[n].flip_rate["corpus"][name].rate for n in (1, 2)]
            x, y, drawn_style = drawn[2 * k + f]
            assert y == rates and drawn_style == style
            assert x == pytest.approx([0.25, 0.5], abs=half_unit)  # shifted sideways, less than half a unit
    assert len({line[0][0] for line in drawn}) == len(drawn)  # no two methods' points on top of each other
    bands = [c.get_paths()[0].vertices[:, 1] for c in lower.collections if c.get_paths()]
    first = result.methods["angular"].sets[1].flip_rate["corpus"]["strict-match"].ci95
    assert min(bands[0]) == pytest.approx(first[0]) and max(bands[0]) <= 1.0
    [legend] = fig.legends
    labels = [t.get_text() for t in legend.get_texts()]
    assert labels[-2:] == ["answers changed (strict-match)", "answers changed (flexible-extract)"]
    renderer = fig.canvas.get_renderer()
    box = legend.get_window_extent(renderer)
    assert not any(box.overlaps(ax.get_window_extent(renderer)) for ax in (upper, lower))


def test_a_sequential_curve_draws_each_sets_anytime_interval_and_says_so():
    result = curve_result_sequential()
    fig = prune_curve_figure(result, "corpus")
    [ax] = fig.axes
    [legend] = fig.legends
    labels = [t.get_text() for t in legend.get_texts()]
    assert "anytime 95 % (paired ΔP, sequential)" in labels and "95 % (paired ΔP)" not in labels
    bands = [[v for path in c.get_paths() for v in path.vertices[:, 1]] for c in ax.collections if c.get_paths()]
    for band, strategy in zip(bands, result.methods.values(), strict=True):
        edges = [3.0 + bound for n in (1, 2) for bound in strategy.sets[n].scores["corpus"]["nll"].delta_cs95]
        assert min(band) == pytest.approx(min(edges)) and max(band) == pytest.approx(max(edges))
