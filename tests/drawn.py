"""Reading a drawn figure back: the numbers in its cells and bars, its marks, whole files on disk.

The plot tests hold what matplotlib drew against the result's numbers, recomputed here by plain loops
(independent of the plotting code).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from matplotlib.collections import PathCollection
from matplotlib.container import BarContainer, ErrorbarContainer

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
PDF_MAGIC = b"%PDF-"


def expected_cells(distance, num_layers):
    """{(n, start): value} for every cell of the triangle, by plain loops (independent of span_matrix)."""
    return {
        (n, start): distance[start][start + n] for n in range(1, num_layers + 1) for start in range(num_layers - n + 1)
    }


def expected_minima(distance, num_layers):
    out = {}
    for n in range(1, num_layers + 1):
        row = [
            (distance[start][start + n], start)
            for start in range(num_layers - n + 1)
            if math.isfinite(distance[start][start + n])
        ]
        if row:
            out[n] = min(row)[1]
    return out


def assert_drawn_matrix(image_array, cells, num_layers):
    array = np.ma.asarray(image_array)
    assert array.shape == (num_layers, num_layers)
    mask = np.ma.getmaskarray(array)
    for n in range(1, num_layers + 1):
        for start in range(num_layers):
            value = cells.get((n, start))
            if value is None or not math.isfinite(value):
                assert mask[n - 1, start], (n, start)
            else:
                assert not mask[n - 1, start], (n, start)
                assert array[n - 1, start] == pytest.approx(value, abs=1e-12), (n, start)


def marked_minima(ax) -> dict[int, int]:
    points = []
    for patch in ax.patches:
        if patch.get_gid() == "row-minimum":
            x, y = patch.get_xy()
            points.append((x + 0.5, y + 0.5))
    for collection in ax.collections:
        if isinstance(collection, PathCollection) and collection.get_gid() == "row-minimum":
            points.extend(map(tuple, collection.get_offsets()))
    marked = {int(round(n)): int(round(start)) for start, n in points}
    assert len(marked) == len(points), "two marks in one row"
    return marked


def marked_candidates(ax) -> set[tuple[int, int]]:
    """(n, l) of every cell marked as not significantly above its row minimum (boxes or dots)."""
    points = []
    for patch in ax.patches:
        if patch.get_gid() == "row-candidate":
            x, y = patch.get_xy()
            points.append((x + patch.get_width() / 2, y + patch.get_height() / 2))
    for collection in ax.collections:
        if isinstance(collection, PathCollection) and collection.get_gid() == "row-candidate":
            points.extend(map(tuple, collection.get_offsets()))
    return {(int(round(n)), int(round(start))) for start, n in points}


def file_magic(path: Path, magic: bytes) -> bool:
    return path.is_file() and path.read_bytes()[: len(magic)] == magic


def delta_bars(ax) -> BarContainer:
    return next(c for c in ax.containers if isinstance(c, BarContainer) and len(c) > 1)


def errorbar_spans(ax) -> list[tuple[float, float]]:
    """(low, high) of every vertical error bar drawn on `ax`, in drawing order."""
    spans = []
    for container in ax.containers:
        if isinstance(container, ErrorbarContainer) and container.lines[2]:
            spans += [(float(s[0][1]), float(s[1][1])) for s in container.lines[2][0].get_segments()]
    return spans


def band_limits(ax, label: str) -> tuple[float, float]:
    """The y extent of the one horizontal band labelled `label`."""
    bands = [p for p in ax.patches if p.get_label() == label]
    assert len(bands) == 1, [p.get_label() for p in ax.patches]
    ys = bands[0].get_path().transformed(bands[0].get_patch_transform()).vertices[:, 1]
    return float(min(ys)), float(max(ys))


def legend_texts(ax) -> list[str]:
    legend = ax.get_legend()
    return [] if legend is None else [t.get_text() for t in legend.get_texts()]


def drawn_texts(fig) -> list:
    """Every text `fig` draws: titles, axis labels, tick labels in view, annotations, legend entries."""
    texts = list(fig.texts) + [t for t in (getattr(fig, "_suptitle", None),) if t is not None]
    for ax in fig.axes:
        if not ax.get_visible():
            continue
        texts += [ax.title, ax._left_title, ax._right_title, *ax.texts]
        for axis, limits in ((ax.xaxis, ax.get_xlim()), (ax.yaxis, ax.get_ylim())):
            if not axis.get_visible():
                continue
            texts.append(axis.label)
            low, high = min(limits), max(limits)
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                inside = low <= tick.get_loc() <= high
                texts += [label for label in (tick.label1, tick.label2) if inside and label.get_visible()]
        legend = ax.get_legend()
        if legend is not None and legend.get_visible():
            texts += list(legend.get_texts())
    unique = {id(t): t for t in texts}  # the suptitle is also among fig.texts
    return [t for t in unique.values() if t.get_visible() and t.get_text().strip()]


def points_under_legend(legend_ax, *axes) -> list[tuple[float, float]]:
    """What `legend_ax`'s legend box covers of `axes` (default: its own), as points in pixels.

    The points are the markers and vertices of every line, and points every few pixels along every error
    bar and other line segment (a LineCollection), so a legend drawn over an interval counts too.
    """
    from matplotlib.collections import LineCollection
    from matplotlib.patches import Rectangle

    fig = legend_ax.figure
    fig.canvas.draw()
    box = legend_ax.get_legend().get_window_extent(fig.canvas.get_renderer())
    covered = []
    for ax in axes or (legend_ax,):
        # Lines in data coordinates (axhline/axvline mix in axes coordinates: references, not data).
        lines = [line for line in ax.get_lines() if line.get_transform() == ax.transData]
        points = [np.column_stack([line.get_xdata(), line.get_ydata()]).astype(float) for line in lines]
        for collection in ax.collections:
            if isinstance(collection, LineCollection):
                for segment in collection.get_segments():
                    a, b = np.asarray(segment[0], float), np.asarray(segment[-1], float)
                    points.append(a + np.linspace(0, 1, 50)[:, None] * (b - a))
        for patch in ax.patches:  # a bar's value end, across its width
            if isinstance(patch, Rectangle) and patch.get_transform().contains_branch(ax.transData):
                end = patch.get_y() + patch.get_height()
                xs = patch.get_x() + np.linspace(0, 1, 20) * patch.get_width()
                points.append(np.column_stack([xs, np.full(20, end)]))
        for xy in points:
            xy = xy[np.isfinite(xy).all(axis=1)]
            for x, y in ax.transData.transform(xy) if len(xy) else []:
                if box.x0 <= x <= box.x1 and box.y0 <= y <= box.y1:
                    covered.append((float(x), float(y)))
    return covered


def overlapping_texts(fig, slack: float = 1.0) -> list[tuple[str, str]]:
    """Pairs of drawn texts of `fig` whose rendered boxes overlap (by more than `slack` pixels each way)."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in drawn_texts(fig)]
    boxes = [(text, box) for text, box in boxes if box.width > 0 and box.height > 0]
    pairs = []
    for i, (first, a) in enumerate(boxes):
        for second, b in boxes[i + 1 :]:
            if min(a.x1, b.x1) - max(a.x0, b.x0) > slack and min(a.y1, b.y1) - max(a.y0, b.y0) > slack:
                pairs.append((first, second))
    return pairs
