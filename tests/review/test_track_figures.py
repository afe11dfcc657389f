"""The history's figures and the report's inline SVG: what they draw, how they label their intervals."""

from __future__ import annotations

import re

import pytest

from layerprobe.plots import figure_svg, pyplot, track_figures
from layerprobe.review import read_track


@pytest.fixture(scope="module")
def history(review_runs):
    return read_track(review_runs.scrambled)[1]


def legend_texts(fig) -> str:
    texts = []
    for ax in fig.axes:
        legend = ax.get_legend()
        if legend is not None:
            texts += [t.get_text() for t in legend.get_texts()] + [legend.get_title().get_text()]
        texts.append(ax.get_title())
    return " | ".join(texts)


def test_every_interval_is_labelled_95_and_numbers_without_one_say_so(history):
    figures = track_figures(history)
    assert list(figures) == ["lazy", "adjacent", "heat", "scores", "delta", "residual", "grad", "curve"]
    labels = {what: legend_texts(fig) for what, fig in figures.items()}
    for what in ("lazy", "adjacent", "scores", "delta", "curve"):
        assert "95 %" in labels[what], what
    assert "per-window values" in labels["adjacent"]  # the fallback's label is tested in test_track_adjacent
    assert "surely below … possibly below" in labels["lazy"]
    assert "paired 95 % CI of ΔP" in labels["delta"]
    for what in ("residual", "grad"):
        assert "no interval" in labels[what], what
    for fig in figures.values():
        pyplot().close(fig)


def test_the_lines_are_the_tracked_numbers_at_the_steps(history):
    figures = track_figures(history)
    line = figures["lazy"].axes[0].get_lines()[0]
    assert list(line.get_xdata()) == [1000, 2000, 3000]
    assert list(line.get_ydata()) == [run.angular.lazy_count for run in history.runs]
    adjacent = figures["adjacent"].axes[0].get_lines()[0]
    assert list(adjacent.get_ydata()) == pytest.approx([run.angular.mean_adjacent for run in history.runs])
    grad = figures["grad"].axes[0].get_lines()
    assert [list(g.get_ydata()) for g in grad] == [run.depth.grad for run in history.runs]
    heat = figures["heat"].axes[0]
    assert [t.get_text() for t in heat.get_yticklabels()] == ["step 1000", "step 2000", "step 3000"]
    for fig in figures.values():
        pyplot().close(fig)


def test_inline_svg_has_its_own_ids_and_no_document_wrapper(history):
    figures = track_figures(history)
    first = figure_svg(figures["lazy"], "a", "lazy <blocks>")
    second = figure_svg(figures["adjacent"], "b", "adjacent")
    assert first.startswith("<svg") and "<?xml" not in first and "DOCTYPE" not in first and "metadata" not in first
    assert "http" not in first + second
    assert "<title>lazy &lt;blocks&gt;</title>" in first and 'aria-label="lazy &lt;blocks&gt;"' in first
    ids_a, ids_b = (set(re.findall(r'id="([^"]+)"', svg)) for svg in (first, second))
    assert ids_a and all(i.startswith("a-") for i in ids_a) and not ids_a & ids_b
    references = re.findall(r'(?:url\(#|href="#)([^)"]+)', first)
    assert references and set(references) <= ids_a  # every reference points inside its own figure
    assert re.search(r'class="figure" role="img"', first) and "max-width: " in first
    for fig in figures.values():
        pyplot().close(fig)
