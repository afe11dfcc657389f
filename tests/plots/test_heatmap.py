"""The angular heatmap: the drawn array holds the result's numbers in the right cells, minima and unclear
rows are marked, and the files are whole."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pytest
from drawn import (
    PDF_MAGIC,
    PNG_MAGIC,
    assert_drawn_matrix,
    expected_cells,
    expected_minima,
    file_magic,
    marked_candidates,
    marked_minima,
)
from factories import angular_from_walk
from matplotlib.figure import Figure

from layerprobe.plots.heatmap import angular_figure, plot_angular, span_matrix, span_minima
from layerprobe.results import AngularResult, angular_summary

pytestmark = pytest.mark.usefixtures("no_leaked_figures")


@pytest.mark.parametrize("num_layers", [6, 80])
def test_span_matrix_puts_each_distance_in_its_cell(num_layers):
    result = angular_from_walk(num_layers, nan_cells=[(1, 2), (0, num_layers)])
    matrix = span_matrix(result.distance)
    assert_drawn_matrix(matrix, expected_cells(result.distance, num_layers), num_layers)
    assert span_minima(matrix) == expected_minima(result.distance, num_layers)


def test_span_matrix_breaks_ties_to_the_lowest_start_layer():
    distance = [[0.0] * 5 for _ in range(5)]
    for i in range(5):
        for j in range(5):
            distance[i][j] = 0.5 if i != j else 0.0
    distance[1][2] = distance[3][4] = 0.1
    assert span_minima(span_matrix(distance))[1] == 1


@pytest.mark.parametrize("num_layers", [6, 80])
def test_heatmap_draws_the_distances_and_marks_row_minima(num_layers):
    nan_cells = [(2, 4), (1, 2)] if num_layers == 6 else [(10, 11), (0, 80), (40, 45)]
    result = angular_from_walk(num_layers, seed=num_layers, nan_cells=nan_cells)
    fig = angular_figure(result)
    try:
        ax = fig.axes[0]
        image = ax.images[0]
        cells = expected_cells(result.distance, num_layers)
        assert_drawn_matrix(image.get_array(), cells, num_layers)
        assert image.get_clim() == (0.0, 1.0)
        assert image.cmap.name == "viridis_r"  # small distances yellow, as in the papers
        assert image.origin == "lower"
        assert tuple(image.get_extent()) == (-0.5, num_layers - 0.5, 0.5, num_layers + 0.5)

        # Non-finite cells inside the triangle are drawn on their own layer, the blank triangle is not.
        grey = ~np.ma.getmaskarray(ax.images[1].get_array())
        nonfinite = {(n, start) for (n, start), v in cells.items() if not math.isfinite(v)}
        assert nonfinite and {(n + 1, start) for n, start in zip(*np.nonzero(grey), strict=True)} == nonfinite

        expected = expected_minima(result.distance, num_layers)
        assert marked_minima(ax) == expected
        # The result's own summary (written independently in results.py) agrees on every row.
        summary = angular_summary(result.distance)["most_redundant"]
        assert {int(n): v["layer"] for n, v in summary.items()} == expected

        texts = [t for t in ax.texts if t.get_text()]
        if num_layers <= 12:
            assert len(texts) == num_layers * (num_layers + 1) // 2
            assert sum(t.get_text() == "nan" for t in texts) == len(nonfinite)
        else:
            assert texts == []
            assert len(ax.get_xticks()) <= 20 and len(ax.get_yticks()) <= 20
        assert "4,096 tokens" in ax.get_title() and "mean over all positions" in ax.get_title()
        assert "org/tiny-model" in ax.get_title()
        assert any("angular distance" in other.get_ylabel() for other in fig.axes[1:])
    finally:
        plt.close(fig)


@pytest.mark.parametrize("num_layers", [6, 80])
def test_heatmap_marks_cells_not_significantly_above_the_row_minimum(num_layers):
    result = angular_from_walk(num_layers, seed=3, nan_cells=[(1, 2)], stderr=0.01 if num_layers == 6 else 0.002)
    expected = set()
    for n in range(1, num_layers + 1):  # by plain loops: within 1.96 × sqrt(se² + se_min²) of the row minimum
        row = {l: result.distance[l][l + n] for l in range(num_layers - n + 1)}
        row = {l: d for l, d in row.items() if math.isfinite(d)}
        best = min(row, key=lambda l: (row[l], l))
        se = {l: result.distance_stderr[l][l + n] for l in row}
        expected |= {
            (n, l) for l, d in row.items() if l != best and d - row[best] <= 1.96 * math.hypot(se[l], se[best])
        }
    assert expected, "the fixture should leave some rows unclear"
    fig = angular_figure(result)
    try:
        ax = fig.axes[0]
        assert marked_candidates(ax) == expected
        assert not expected & set(marked_minima(ax).items())
        summary = angular_summary(result.distance, stderr=result.distance_stderr)["most_redundant"]
        for n, choice in summary.items():
            others = {(int(n), l) for l in choice["candidates"] if l != choice["layer"]}
            assert others == {cell for cell in expected if cell[0] == int(n)}
            assert choice["clear"] == (not others)
    finally:
        plt.close(fig)
    # A file written before stderrs existed: the minima only, no candidate marks.
    fig = angular_figure(angular_from_walk(num_layers, seed=3))
    try:
        assert marked_candidates(fig.axes[0]) == set() and marked_minima(fig.axes[0])
    finally:
        plt.close(fig)


def test_a_paired_difference_stderr_decides_the_candidates_when_present():
    unpaired = angular_from_walk(6, seed=3, stderr=0.01)
    loose = angular_summary(unpaired.distance, stderr=unpaired.distance_stderr)
    assert loose["candidates_test"] == "unpaired" and not all(c["clear"] for c in loose["most_redundant"].values())
    # The same cells, but each one's difference to its row minimum known to 1e-4 (cells move together).
    tight = AngularResult(**{**unpaired.__dict__, "row_difference_stderr": [[1e-4] * 7 for _ in range(7)]})
    summary = tight.summarize()
    assert summary["candidates_test"] == "paired"
    for n, choice in summary["most_redundant"].items():
        row = {l: tight.distance[l][l + int(n)] for l in range(7 - int(n))}
        expected = sorted(l for l, d in row.items() if d - row[choice["layer"]] <= 1.96e-4)
        assert choice["candidates"] == expected
    assert all(c["clear"] for c in summary["most_redundant"].values())
    fig = angular_figure(tight)
    try:
        assert marked_candidates(fig.axes[0]) == set()
    finally:
        plt.close(fig)


@pytest.mark.parametrize("num_layers", [6, pytest.param(80, marks=pytest.mark.slow)])  # 80: over 2.5 s
def test_plot_angular_writes_whole_png_and_pdf(tmp_path, num_layers):
    paths = plot_angular(angular_from_walk(num_layers, nan_cells=[(0, 1)]), tmp_path / "out")
    assert [p.name for p in paths] == ["angular.png", "angular.pdf"]
    assert file_magic(paths[0], PNG_MAGIC) and file_magic(paths[1], PDF_MAGIC)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["angular.pdf", "angular.png"]


def test_a_failed_save_leaves_no_file_behind(tmp_path, monkeypatch):
    (tmp_path / "angular.png").write_bytes(b"old")

    def broken_savefig(self, fname, **kwargs):
        Path(fname).write_bytes(PNG_MAGIC + b"half")
        raise OSError("disk full")

    monkeypatch.setattr(Figure, "savefig", broken_savefig)
    with pytest.raises(OSError, match="disk full"):
        plot_angular(angular_from_walk(6), tmp_path)
    assert (tmp_path / "angular.png").read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["angular.png"]


def test_a_difference_that_rounds_to_zero_is_written_without_a_sign():
    from layerprobe.plots.heatmap import DIFF_CMAP, draw_heatmap

    diff = np.ma.masked_invalid(np.array([[-0.0002, 0.0013, -0.0041], [0.0004, -0.002, np.nan], [0.0, np.nan, np.nan]]))
    fig, ax = plt.subplots()
    try:
        draw_heatmap(ax, diff, cmap=DIFF_CMAP, limits=(-0.005, 0.005), annotate=True, mark_minima=False)
        texts = sorted(t.get_text() for t in ax.texts)
        assert texts == sorted(["0.000", "+0.001", "-0.004", "0.000", "-0.002", "0.000"])
    finally:
        plt.close(fig)
