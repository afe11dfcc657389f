"""A figure as SVG text to put inside an HTML page: self-contained, scalable, with ids of its own.

matplotlib's SVG is a whole document (XML prolog, DOCTYPE, RDF metadata naming web addresses) whose ids
(`axes_1`, clip paths, markers) repeat from one figure to the next. Inlined several to a page, a clip
path of one figure would clip another; so every id and reference gets the figure's own prefix, the
document wrapper and its namespace declarations go (an HTML parser knows SVG's), and the root scales to
its container (never wider than the figure was drawn). Glyphs are drawn as paths (`svg.fonttype: path`),
so formulas look as in the PNG whatever fonts the reader has; the figure's `<title>` and `aria-label`
say what it shows, for screen readers.
"""

from __future__ import annotations

import html
import io
import re
from typing import TYPE_CHECKING

from layerprobe.plots.common import printable_texts, pyplot

if TYPE_CHECKING:
    from matplotlib.figure import Figure

_ID = re.compile(r'\bid="([^"]+)"')
_REFERENCE = re.compile(r'(url\(#|href="#)([^)"]+)')
_NAMESPACE = re.compile(r' xmlns(?::xlink)?="[^"]*"')
_SIZE = re.compile(r'<svg([^>]*?) width="([\d.]+)pt" height="([\d.]+)pt"')
POINTS_TO_PIXELS = 96 / 72


def figure_svg(fig: Figure, prefix: str, label: str) -> str:
    """The figure as an inline `<svg>` element (the figure is closed), its ids prefixed with `prefix`.

    Args:
        fig: The figure, open; it is closed here, also on failure.
        prefix: Unique within the page: letters, digits and '-' (e.g. "run2-depth").
        label: What the figure shows, for screen readers (`aria-label`) and as its tooltip.
    """
    import matplotlib

    buffer = io.StringIO()
    try:
        printable_texts(fig)
        with matplotlib.rc_context({"svg.fonttype": "path", "svg.hashsalt": prefix}):
            fig.savefig(buffer, format="svg", metadata={"Date": None, "Creator": None})
    finally:
        pyplot().close(fig)
    text = buffer.getvalue()
    text = text[text.index("<svg") :]
    text = re.sub(r"<metadata>.*?</metadata>\s*", "", text, flags=re.DOTALL)
    text = _NAMESPACE.sub("", text, count=2)  # an HTML parser puts <svg> and xlink:href in their namespaces
    text = _ID.sub(lambda m: f'id="{prefix}-{m[1]}"', text)
    text = _REFERENCE.sub(lambda m: f"{m[1]}{prefix}-{m[2]}", text)
    size = _SIZE.search(text)
    width = float(size[2]) * POINTS_TO_PIXELS if size else None
    style = f' style="max-width: {width:.0f}px"' if width else ""
    attributes = f' class="figure" role="img" aria-label="{html.escape(label)}"{style}'
    text = _SIZE.sub(lambda m: f"<svg{m[1]}{attributes}", text, count=1)
    return _with_title(text, label)


def _with_title(svg: str, label: str) -> str:
    """Insert `<title>` as the root's first child: the figure's accessible name and tooltip."""
    end = svg.index(">") + 1
    return f"{svg[:end]}\n <title>{html.escape(label)}</title>{svg[end:]}"
