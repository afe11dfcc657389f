"""The angular heatmap as inline SVG cells, each telling its value and standard error on hover.

The same view as `angular.png` (start l across, span n up with n = 1 at the bottom, small distances
yellow on a fixed [0, 1] scale, each span's minimum boxed in red and the other starts not significantly
above it in dashed orange), drawn as one `<rect>` per cell so that every cell carries its own `<title>`:
"d(x^3, x^5) = 0.1234 ± 0.0005" (the value and its standard error, as angular.json holds them). The
browser shows the title on hover, screen readers read it, and the page's script echoes it under the map.
"""

from __future__ import annotations

import html
import math

from layerprobe.plots import HEATMAP_CMAP
from layerprobe.results import AngularResult

SIDE = 520  # px: the side of the cells' square, whatever L (cells 6 … 110 px)
MARGIN_LEFT, MARGIN_BOTTOM, MARGIN_TOP, LEGEND = 46, 40, 8, 70
MINIMUM, CANDIDATE, MISSING = "#e00000", "#ff7f0e", "#cfcfcf"


def cell_title(start: int, span: int, distance: float, stderr: float | None) -> str:
    """A cell's hover text: `d(x^3, x^5) = 0.1234 ± 0.0005` (4 decimals, the stderr to 2 significant digits)."""
    pair = f"d(x^{start}, x^{start + span})"
    if not math.isfinite(distance):
        return f"{pair}: not measured (no finite position)"
    if stderr is None or not math.isfinite(stderr):
        return f"{pair} = {distance:.4f} (no standard error)"
    return f"{pair} = {distance:.4f} ± {stderr:.2g}"


def colours(values: list[float]) -> list[str]:
    """Hex colours of distances on the heatmap's colour map, [0, 1] fixed (grey where not finite)."""
    import matplotlib
    from matplotlib.colors import to_hex

    cmap = matplotlib.colormaps[HEATMAP_CMAP]
    return [to_hex(cmap(min(1.0, max(0.0, v)))) if math.isfinite(v) else MISSING for v in values]


def heatmap_svg(result: AngularResult, prefix: str) -> str:
    """The heatmap of `result` as an `<svg>` element whose cells have ids `<prefix>-cell-<l>-<n>`."""
    size = result.num_layers
    cell = max(6.0, min(110.0, SIDE / size))
    side = cell * size
    width, height = MARGIN_LEFT + side + LEGEND, MARGIN_TOP + side + MARGIN_BOTTOM
    summary = result.summarize()
    minima = {int(n): c["layer"] for n, c in summary["most_redundant"].items()}
    candidates = {int(n): set(c["candidates"] or []) for n, c in summary["most_redundant"].items()}
    cells = [(l, n) for n in range(1, size + 1) for l in range(size - n + 1)]
    fill = colours([result.distance[l][l + n] for l, n in cells])
    parts = [
        f'<svg class="heatmap" id="{prefix}-heatmap" viewBox="0 0 {width:.0f} {height:.0f}" '
        f'style="max-width: {width:.0f}px" aria-labelledby="{prefix}-heatmap-title">',
        f'<title id="{prefix}-heatmap-title">angular distance d(x^l, x^(l+n)) by start l and span n; '
        "hover a cell for its value ± standard error</title>",
    ]
    for (l, n), colour in zip(cells, fill, strict=True):
        d = result.distance[l][l + n]
        se = None if result.distance_stderr is None else result.distance_stderr[l][l + n]
        x, y = MARGIN_LEFT + l * cell, MARGIN_TOP + (size - n) * cell
        mark = ""
        if minima.get(n) == l:
            mark = " minimum"
        elif l in candidates.get(n, set()):
            mark = " candidate"
        parts.append(
            f'<rect class="cell{mark}" id="{prefix}-cell-{l}-{n}" x="{x:.2f}" y="{y:.2f}" width="{cell:.2f}" '
            f'height="{cell:.2f}" fill="{colour}" data-l="{l}" data-n="{n}" data-d="{d!r}" data-se="{se!r}">'
            f"<title>{html.escape(cell_title(l, n, d, se))}</title></rect>"
        )
    parts += _marks(cells, minima, candidates, cell, size)
    parts += _axes(size, cell, side)
    parts += _legend(MARGIN_LEFT + side + 14, MARGIN_TOP, side, prefix)
    parts.append("</svg>")
    return "\n".join(parts)


def _marks(
    cells: list[tuple[int, int]], minima: dict[int, int], candidates: dict[int, set[int]], cell: float, size: int
) -> list[str]:
    """Boxes over each span's minimum (red) and the starts within noise of it (dashed orange)."""
    out = []
    for l, n in cells:
        x, y = MARGIN_LEFT + l * cell, MARGIN_TOP + (size - n) * cell
        if minima.get(n) == l:
            out.append(
                f'<rect class="mark" x="{x + 1:.2f}" y="{y + 1:.2f}" width="{cell - 2:.2f}" height="{cell - 2:.2f}" '
                f'fill="none" stroke="{MINIMUM}" stroke-width="2" pointer-events="none"/>'
            )
        elif l in candidates.get(n, set()):
            out.append(
                f'<rect class="mark" x="{x + 2:.2f}" y="{y + 2:.2f}" width="{cell - 4:.2f}" height="{cell - 4:.2f}" '
                f'fill="none" stroke="{CANDIDATE}" stroke-width="1.5" stroke-dasharray="3 2" pointer-events="none"/>'
            )
    return out


def _axes(size: int, cell: float, side: float) -> list[str]:
    """Tick labels (thinned beyond 16 blocks) and the two axis titles."""
    step = 1 if size <= 16 else 2 if size <= 32 else 5 if size <= 80 else 10
    out = []
    for l in range(0, size, step):
        x = MARGIN_LEFT + (l + 0.5) * cell
        out.append(f'<text class="tick" x="{x:.1f}" y="{MARGIN_TOP + side + 13:.1f}" text-anchor="middle">{l}</text>')
    for n in sorted({1, *range(step, size + 1, step)}):
        y = MARGIN_TOP + (size - n + 0.5) * cell
        out.append(f'<text class="tick" x="{MARGIN_LEFT - 5}" y="{y + 4:.1f}" text-anchor="end">{n}</text>')
    out.append(
        f'<text class="axis" x="{MARGIN_LEFT + side / 2:.1f}" y="{MARGIN_TOP + side + 32:.1f}" text-anchor="middle">'
        "start layer l (input of block l)</text>"
    )
    out.append(
        f'<text class="axis" transform="translate(12 {MARGIN_TOP + side / 2:.1f}) rotate(-90)" text-anchor="middle">'
        "span n (n = 1 at bottom)</text>"
    )
    return out


def _legend(x: float, y: float, height: float, prefix: str) -> list[str]:
    """A vertical colour bar of the fixed [0, 1] scale (0 at the bottom, as the spans run)."""
    stops = colours([i / 10 for i in range(11)])
    gradient = "".join(f'<stop offset="{i * 10}%" stop-color="{c}"/>' for i, c in enumerate(reversed(stops)))
    return [
        f'<defs><linearGradient id="{prefix}-scale" x1="0" y1="0" x2="0" y2="1">{gradient}</linearGradient></defs>',
        f'<rect x="{x:.1f}" y="{y:.1f}" width="12" height="{height:.1f}" fill="url(#{prefix}-scale)" stroke="#888"/>',
        f'<text class="tick" x="{x + 16:.1f}" y="{y + 9:.1f}">1</text>',
        f'<text class="tick" x="{x + 16:.1f}" y="{y + height:.1f}">0</text>',
        f'<text class="axis" transform="translate({x + 34:.1f} {y + height / 2:.1f}) rotate(-90)" '
        'text-anchor="middle">d(x^l, x^(l+n))</text>',
    ]
