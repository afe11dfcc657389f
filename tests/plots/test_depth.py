"""The depth figure: gradient panel labels, log tick labels that never repeat, and --grad advice by model kind."""

from __future__ import annotations

from dataclasses import replace

import matplotlib.pyplot as plt
import pytest
from drawn import drawn_texts, overlapping_texts, points_under_legend
from factories import depth_dict

from layerprobe.plots.depth import depth_figure, distinct_labels
from layerprobe.results import BlockPlacement, DepthResult, Placement, Spread

pytestmark = pytest.mark.usefixtures("no_leaked_figures")


def _result(**changes) -> DepthResult:
    base = DepthResult.from_dict(depth_dict())
    relative = base.sublayers["attention"]["relative"]
    sublayers = {kind: {"modules": ["m0", "m1"], "relative": relative} for kind in ("attention", "mlp")}
    return replace(base, **{"sublayers": sublayers, **changes})


def _visible_labels(ax) -> list[str]:
    low, high = ax.get_ylim()
    return [
        t.get_text()
        for t in ax.yaxis.get_ticklabels(which="both")
        if t.get_text() and low <= t.get_position()[1] <= high
    ]


@pytest.mark.slow
@pytest.mark.parametrize(
    "values",
    [[1.00, 1.02, 1.05], [1.1, 1.3, 1.2], [0.5, 3.0, 40.0], [1e-3, 0.2, 30.0], [0.98, 1.0, 1.01]],
)
def test_log_axes_never_repeat_a_tick_label(values):
    spread = Spread(values, [0.001] * 3, values, values, [8] * 3)
    update = Spread(values[1:], [0.0] * 2, values[1:], values[1:], [8] * 2)
    sublayers = {kind: {"modules": ["m0", "m1"], "relative": update} for kind in ("attention", "mlp")}
    base = _result()
    grad = replace(base.grad, block=values[1:])
    result = _result(rms=spread, variance=spread, update=update, sublayers=sublayers, grad=grad)
    fig = depth_figure(result)
    try:
        fig.canvas.draw()
        logs = [ax for ax in fig.axes if ax.get_yscale() == "log"]
        assert len(logs) >= 4  # residual, its variance twin, updates, sublayers (and gradients)
        for ax in logs:
            labels = _visible_labels(ax)
            assert len(labels) >= 2, labels
            assert len(set(labels)) == len(labels), labels
            assert not any("10^" in label or "times" in label for label in labels)
    finally:
        plt.close(fig)


def test_distinct_labels_uses_the_fewest_digits_that_separate_them():
    assert distinct_labels([1.0, 2.0, 5.0]) == ["1", "2", "5"]
    assert distinct_labels([1.01, 1.02, 1.03]) == ["1.01", "1.02", "1.03"]
    assert distinct_labels([0.001, 0.01, 0.1, 1.0, 10.0]) == ["0.001", "0.01", "0.1", "1", "10"]


def test_the_gradient_panel_is_labelled_as_a_gradient_norm():
    fig = depth_figure(_result())
    try:
        grad_ax = next(ax for ax in fig.axes if "(d)" in ax.get_title(loc="left"))
        assert "gradient norm" in grad_ax.get_ylabel() and "loss" not in grad_ax.get_ylabel()
        assert "next-token loss" in grad_ax.get_xlabel()  # the loss is named in a note under the axis
    finally:
        plt.close(fig)


@pytest.mark.parametrize(
    ("kind", "suggests"),
    [("causal-lm", True), ("encoder", False), ("extractive-qa", False)],
)
def test_grad_is_suggested_only_where_it_can_run(kind, suggests):
    base = _result()
    fig = depth_figure(replace(base, grad=None, model=replace(base.model, kind=kind)))
    try:
        grad_ax = next(ax for ax in fig.axes if "(d)" in ax.get_title(loc="left"))
        text = " ".join(t.get_text() for t in grad_ax.texts)
        assert "not measured" in text
        assert ("run with --grad" in text) is suggests
        if kind == "encoder":
            assert "masked-LM head" in text
    finally:
        plt.close(fig)


@pytest.mark.parametrize("kind", ["causal-lm", "encoder", "extractive-qa"])
@pytest.mark.slow  # over 2.5 s on 2 cores: the default tier stays under 3 minutes
def test_no_two_labels_of_the_depth_figure_overlap(kind):
    base = _result()
    for result in (base, replace(base, grad=None, model=replace(base.model, kind=kind))):
        fig = depth_figure(result)
        try:
            assert overlapping_texts(fig) == []
        finally:
            plt.close(fig)


def _minilm_like() -> DepthResult:
    """The real MiniLM-L6's residual panel (6 Post-LN blocks; flat, then falling): lines through its upper left."""
    base = _result()
    rms = [0.52, 0.61, 0.61, 0.64, 0.68, 0.54, 0.19]
    variance = [0.27, 0.37, 0.37, 0.41, 0.47, 0.32, 0.05]
    update = [0.62, 0.52, 0.51, 0.57, 0.63, 0.87]

    def spread(values):
        return Spread(values, [0.1 * v for v in values], values, values, [8] * len(values))

    placement = Placement([BlockPlacement(l, "Post-LN") for l in range(6)], "Post-LN", "Post-LN in all 6 blocks")
    sublayers = {
        kind: {"modules": [f"m{l}" for l in range(6)], "relative": spread(update)} for kind in ("attention", "mlp")
    }
    return replace(
        base,
        model=replace(base.model, num_layers=6, kind="encoder"),
        placement=placement,
        rms=spread(rms),
        variance=spread(variance),
        update=spread(update),
        sublayers=sublayers,
        grad=None,
    )


def test_the_residual_legend_covers_neither_line():
    fig = depth_figure(_minilm_like())
    try:
        residual = next(ax for ax in fig.axes if "(a)" in ax.get_title(loc="left"))
        twin = next(ax for ax in fig.axes if ax is not residual and ax.bbox.bounds == residual.bbox.bounds)
        assert [t.get_text() for t in residual.get_legend().get_texts()][:2] == [
            r"RMS $\|x^l\|/\sqrt{d}$",
            "variance across units",
        ]
        assert points_under_legend(residual, residual, twin) == []
    finally:
        plt.close(fig)


def test_the_shaded_bands_say_what_they_are():
    fig = depth_figure(_minilm_like())
    try:
        fig.canvas.draw()
        banded = [ax for ax in fig.axes if ax.collections and ax.get_yscale() == "log"]
        assert len(banded) >= 3  # residual, updates, sublayers
        texts = [t.get_text() for t in drawn_texts(fig)]
        assert any("± 1 SD over positions" in t for t in texts), texts
    finally:
        plt.close(fig)
