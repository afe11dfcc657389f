"""What makes a result pleasant in a notebook: `to_frame()`, `plot()`, `save(dir)`, a short repr, `_repr_html_`.

`Notebook` is a mixin for every result the Python API returns (`AngularResult`, `DepthResult`,
`PruneDropResult`, `StabilityResult`, and the gate's verdict as the API's `Comparison`). Each kind says what
its table is (`table()`: column name → one value per row), how it reads in one line (`headline()`) and which
file of a run directory it is (`run_file`); the mixin does the rest.

This room never imports matplotlib or torch, and the plots room sits above it, so the figures come through a
registry: the room that draws a kind registers the function that draws its figure and the one that writes
the CLI's other files (`register_figures`): plots for angular, depth and prune-drop, the API for stability
(whose markdown report lives in review) and the gate's verdict. pandas is imported only by `to_frame()`, and
only there is it needed (the optional `notebook` extra).
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from layerprobe.core import LayerprobeError, check_output_dir
from layerprobe.results.io import write_json
from layerprobe.results.rundir import RunDir

if TYPE_CHECKING:
    from matplotlib.figure import Figure

Table = dict[str, list[Any]]  # column name → one value per row
FigureOf = Callable[..., "Figure"]  # a result (and the options plot() was given) → its figure
WriteFigures = Callable[[Any, Path], list[Path]]  # a result, a directory → the files the CLI writes beside the JSON

_FIGURES: dict[type, tuple[FigureOf, WriteFigures]] = {}
HTML_ROWS = 64  # a deeper table is cut in `_repr_html_` (to_frame() has every row)


def register_figures(kind: type, figure: FigureOf, write: WriteFigures) -> None:
    """Say how a result kind is drawn (`plot()`) and which files its command writes beside the JSON (`save()`)."""
    _FIGURES[kind] = (figure, write)


def _figures_of(result: object) -> tuple[FigureOf, WriteFigures]:
    found = _FIGURES.get(type(result))
    if found is None:
        raise LayerprobeError(
            f"No figure is registered for {type(result).__name__}.",
            hint="import layerprobe.api (import layerprobe as lp; lp.angular does) before plot() or save().",
        )
    return found


class Notebook:
    """The notebook face of a result (module docstring); a kind implements `table`, `headline` and `run_file`."""

    def table(self) -> Table:
        """The result as columns of equal length, one row per block."""
        raise NotImplementedError

    def headline(self) -> str:
        """The result in a few words: model, depth and the number a reader wants first."""
        raise NotImplementedError

    def run_file(self, run: RunDir) -> Path:
        """Where the CLI writes this result in run directory `run`."""
        raise NotImplementedError

    def to_dict(self) -> dict[str, object]:
        raise NotImplementedError

    def to_frame(self) -> Any:
        """The table as a pandas DataFrame (pandas is optional: `pip install 'layerprobe[notebook]'`)."""
        try:
            import pandas as pd
        except ImportError:
            raise LayerprobeError(
                "to_frame() needs pandas, which is not installed.", hint="pip install 'layerprobe[notebook]'"
            ) from None
        return pd.DataFrame(self.table())

    def plot(self, **options: Any) -> Figure:
        """The figure the CLI draws for this result, as a matplotlib Figure (not saved anywhere).

        `options` go to the kind's figure: `task=` picks a prune-drop result's task (default: the first).
        """
        figure, _ = _figures_of(self)
        return figure(self, **options)

    def save(self, directory: str | Path) -> list[Path]:
        """Write the files the CLI writes (the JSON, then its report and figures) into `directory`; their paths.

        `plot`, `compare`, `track` and `report` read the directory as they read one the CLI wrote. Every
        file is written atomically; the directory is made if missing.
        """
        _, write_figures = _figures_of(self)
        target = Path(directory)
        check_output_dir(target)
        target.mkdir(parents=True, exist_ok=True)
        json_path = write_json(self.run_file(RunDir(target)), self.to_dict())
        return [json_path, *write_figures(self, target)]

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.headline()}>"

    def _repr_html_(self) -> str:
        table = self.table()
        columns = list(table)
        rows = len(table[columns[0]]) if columns else 0
        head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
        body = "".join(
            "<tr>" + "".join(f"<td>{html.escape(cell_text(table[c][r]))}</td>" for c in columns) + "</tr>"
            for r in range(min(rows, HTML_ROWS))
        )
        more = f"<p>… {rows - HTML_ROWS} more rows (to_frame() has them all)</p>" if rows > HTML_ROWS else ""
        title = html.escape(f"{type(self).__name__}: {self.headline()}")
        return f"<div><p><b>{title}</b></p><table><tr>{head}</tr>{body}</table>{more}</div>"


def cell_text(value: object) -> str:
    """A table cell as text: floats to 4 significant digits, None as a dash."""
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.4g}" if math.isfinite(value) else str(value)
    return str(value)
