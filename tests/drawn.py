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
