"""angular.json (`layerprobe/angular@1`): the angular distance between the inputs of every pair of blocks.

Its `summary` block (lazy blocks, and per span n the start whose removal Gromov et al. would choose) is
computed here, once, from the matrix: humans, `compare` and the plots read the same numbers, and a
summary read from a file is recomputed, never trusted.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TypedDict, TypeVar

import layerprobe.results.validate as v
from layerprobe.results.io import ANGULAR_SCHEMA, check_schema
from layerprobe.results.json_types import JSONObject, Record
from layerprobe.results.notebook import Notebook, Table
from layerprobe.results.provenance import ModelInfo, RunInfo
from layerprobe.results.rundir import RunDir
from layerprobe.results.validate import Node

T = TypeVar("T")
LAZY_THRESHOLD = 0.2
SIGNIFICANCE_Z = 1.96  # "not significantly above the row minimum": within 1.96 standard errors
ANGULAR_DATA_FIELDS: dict[str, v.Kind] = {
    "dataset": v.text(optional=True),
    "config": v.text(optional=True),
    "split": v.text(optional=True),
    "text_field": v.text(optional=True),
    "tokens": v.integer(optional=True, minimum=1),
    "seq_len": v.integer(optional=True, minimum=1),
    "windows": v.integer(optional=True, minimum=1),
    "positions": v.text(optional=True),
    "positions_averaged": v.integer(optional=True, minimum=0),
    "chat_template": v.flag(optional=True),
}


class SpanChoice(TypedDict):
    """Which start l to drop n blocks from, and (with standard errors) how sure that choice is."""

    layer: int
    distance: float
    stderr: float | None
    clear: bool | None
    candidates: list[int] | None


class AngularSummary(TypedDict):
    """The numbers `compare` gates on and a reader wants first (see `angular_summary`)."""

    lazy_threshold: float
    adjacent: list[float]
    adjacent_stderr: list[float] | None
    lazy_layers: list[int]
    lazy_count: int
    mean_adjacent: float | None
    unmeasured: list[list[int]]
    significance_z: float | None
    candidates_test: str | None
    most_redundant: dict[str, SpanChoice]


@dataclass(frozen=True, repr=False)
class AngularResult(Notebook):
    """The full angular-distance matrix between the inputs of every pair of blocks.

    `distance[i][j]` is the mean over measured positions of d(x^i, x^j), 0 <= i, j <= L, where x^i is
    the input of block i and x^L the output of the last block before any final norm.
    `distance_stderr[i][j]` is its standard error from the spread between windows, and
    `nonfinite_positions[i][j]` the positions left out of that entry because x^i or x^j held NaN/inf.
    `row_difference_stderr[l][l+n]` is the stderr of d(x^l, x^(l+n)) minus the minimum of span row n,
    paired over windows. All three are None for files written before they existed. `summary` is None
    until the result is read back (`to_dict` computes it).

    `adjacent_windows[w][l]` is window w's own mean of d(x^l, x^(l+1)) over its measured positions, and
    `window_positions[w]` that window's positions: weighted by them, the windows' mean of column l is
    `distance[l][l+1]` (up to float rounding). `layerprobe stability` resamples these rows. Both are None
    for files written before they existed.
    """

    model: ModelInfo
    data: Record
    distance: list[list[float]]
    nonfinite_tokens: int
    run: RunInfo
    tokens_per_second: float
    summary: AngularSummary | None = None
    distance_stderr: list[list[float]] | None = None
    nonfinite_positions: list[list[int]] | None = None
    row_difference_stderr: list[list[float]] | None = None
    adjacent_windows: list[list[float]] | None = None
    window_positions: list[int] | None = None

    def summarize(self, threshold: float = LAZY_THRESHOLD) -> AngularSummary:
        """`angular_summary` of this result, with whichever standard errors it carries."""
        return angular_summary(
            self.distance, threshold, stderr=self.distance_stderr, difference_stderr=self.row_difference_stderr
        )

    @property
    def num_layers(self) -> int:
        return len(self.distance) - 1

    def table(self) -> Table:
        """Per block l: d(x^l, x^(l+1)), its standard error, and whether the block is lazy."""
        summary = self.summary or self.summarize()
        stderr = summary["adjacent_stderr"]
        return {
            "block": list(range(self.num_layers)),
            "adjacent_distance": list(summary["adjacent"]),
            "stderr": list(stderr) if stderr is not None else [None] * self.num_layers,
            "lazy": [l in summary["lazy_layers"] for l in range(self.num_layers)],
        }

    def headline(self) -> str:
        summary = self.summary or self.summarize()
        mean = summary["mean_adjacent"]
        return (
            f"{self.model.id}: {self.num_layers} blocks, {summary['lazy_count']} lazy "
            f"(d < {summary['lazy_threshold']:g}), mean adjacent d "
            + (f"{mean:.4f}" if mean is not None else "unmeasured")
            + f", {self.data.get('tokens')} tokens"
        )

    def run_file(self, run: RunDir) -> Path:
        return run.angular_json

    def to_dict(self) -> dict[str, object]:
        return {
            "schema": ANGULAR_SCHEMA,
            "model": asdict(self.model),
            "data": dict(self.data),
            "distance": self.distance,
            "distance_stderr": self.distance_stderr,
            "row_difference_stderr": self.row_difference_stderr,
            "nonfinite_tokens": self.nonfinite_tokens,
            "nonfinite_positions": self.nonfinite_positions,
            "adjacent_windows": self.adjacent_windows,
            "window_positions": self.window_positions,
            "tokens_per_second": self.tokens_per_second,
            "summary": self.summary or self.summarize(),
            "run": asdict(self.run),
        }

    @classmethod
    def from_dict(cls, data: JSONObject, source: str = "angular result") -> AngularResult:
        """Validate every field (see `ANGULAR_DATA_FIELDS`, `MODEL_FIELDS`) and build the result.

        The stored `summary` is recomputed from `distance`, so it can never disagree with the matrix.

        Raises:
            ResultError: naming `source` and the JSON path of the first bad field.
        """
        root = Node(data, source)
        check_schema(root, ANGULAR_SCHEMA)
        model = ModelInfo.from_dict(root.key("model"))
        distance = _distance_matrix(root.key("distance"))
        size = len(distance)
        stderr = _optional_matrix(root.key("distance_stderr"), size, lambda cell: cell.number(low=0.0))
        difference = _optional_matrix(root.key("row_difference_stderr"), size, lambda cell: cell.number(low=0.0))
        if model.num_layers != len(distance) - 1:
            root.key("model").key("num_layers").fail(
                f"L = {len(distance) - 1} to match the {len(distance)}×{len(distance)} distance matrix",
                f"got {model.num_layers}",
            )
        adjacent_windows, window_positions = _per_window(root, size - 1)
        return cls(
            model=model,
            data=v.checked_record(root.key("data"), ANGULAR_DATA_FIELDS),
            distance=distance,
            nonfinite_tokens=root.key("nonfinite_tokens").integer(default=0, minimum=0),
            run=RunInfo.from_dict(root.key("run")),
            tokens_per_second=root.key("tokens_per_second").number(default=0.0, low=0.0),
            summary=angular_summary(distance, stderr=stderr, difference_stderr=difference),
            distance_stderr=stderr,
            nonfinite_positions=_optional_matrix(
                root.key("nonfinite_positions"), size, lambda cell: cell.integer(minimum=0)
            ),
            row_difference_stderr=difference,
            adjacent_windows=adjacent_windows,
            window_positions=window_positions,
        )


def angular_summary(
    distance: list[list[float]],
    threshold: float = LAZY_THRESHOLD,
    stderr: list[list[float]] | None = None,
    z: float = SIGNIFICANCE_Z,
    difference_stderr: list[list[float]] | None = None,
) -> AngularSummary:
    """The numbers `compare` gates on, computed once so that humans and CI read the same values.

    A block l is "lazy" when d(x^l, x^(l+1)) < threshold: it barely turns its input. Unmeasured (NaN)
    entries are skipped by every statistic here and listed in `unmeasured`, so a broken block can
    neither be "most similar" nor pull a mean to NaN. With `stderr`, each span's choice of blocks to
    drop says how sure it is: `candidates` are the starts whose distance is not significantly above the
    row minimum, and `clear` is true when only the minimum is. The test is paired when
    `difference_stderr` (the stderr of each cell minus its row minimum, over the same windows) is given:
    d_l − d_min ≤ z · se(d_l − d_min); otherwise unpaired and conservative: d_l − d_min ≤ z · sqrt(se_l² + se_min²).
    """
    num_layers = len(distance) - 1
    adjacent = [distance[l][l + 1] for l in range(num_layers)]
    finite_adjacent = [d for d in adjacent if math.isfinite(d)]
    most_redundant = {}
    for span in range(1, num_layers + 1):
        choice = span_choice(distance, stderr, span, z, difference_stderr)
        if choice is not None:
            most_redundant[str(span)] = choice
    lazy = [l for l, d in enumerate(adjacent) if d < threshold]
    return {
        "lazy_threshold": threshold,
        "adjacent": adjacent,
        "adjacent_stderr": None if stderr is None else [stderr[l][l + 1] for l in range(num_layers)],
        "lazy_layers": lazy,
        "lazy_count": len(lazy),
        "mean_adjacent": sum(finite_adjacent) / len(finite_adjacent) if finite_adjacent else None,
        "unmeasured": [
            [i, j]
            for i in range(num_layers + 1)
            for j in range(i + 1, num_layers + 1)
            if not math.isfinite(distance[i][j])
        ],
        "significance_z": None if stderr is None else z,
        "candidates_test": None if stderr is None else "unpaired" if difference_stderr is None else "paired",
        "most_redundant": most_redundant,
    }


def span_choice(
    distance: list[list[float]],
    stderr: list[list[float]] | None,
    span: int,
    z: float,
    difference_stderr: list[list[float]] | None = None,
) -> SpanChoice | None:
    """Gromov et al.'s start l* = argmin_l d(x^l, x^(l+span)) (ties: lowest l), and the starts as good within noise.

    Paired, the difference to the minimum is judged with its own stderr over the same windows. Without it
    (older files) the unpaired combined stderr is used: both entries come from the same windows, so their
    errors are positively correlated and the true stderr of the difference is smaller; the candidate list
    is then on the generous side (a "clear" choice is really clear).
    """
    num_layers = len(distance) - 1
    row = [(distance[l][l + span], l) for l in range(num_layers - span + 1) if math.isfinite(distance[l][l + span])]
    if not row:
        return None
    value, start = min(row)
    if stderr is None:
        return {"layer": start, "distance": value, "stderr": None, "clear": None, "candidates": None}
    best_se = stderr[start][start + span]

    def noise(l: int) -> float:
        if difference_stderr is not None:
            return difference_stderr[l][l + span]
        return math.hypot(stderr[l][l + span], best_se)

    # A NaN stderr cannot rule a start out.
    candidates = [l for d, l in sorted(row, key=lambda item: item[1]) if not d - value > z * noise(l)]
    return {
        "layer": start,
        "distance": value,
        "stderr": best_se,
        "clear": candidates == [start],
        "candidates": candidates,
    }


def _distance_matrix(node: Node) -> list[list[float]]:
    """An (L+1)×(L+1) matrix of distances in [0, 1] (or NaN), L ≥ 1; a ragged or empty one is refused."""
    rows = node.items()
    size = len(rows)
    if size < 2:
        node.fail("an (L+1)×(L+1) matrix with L ≥ 1 block", f"got {size} row{'s' if size != 1 else ''}")
    matrix = []
    for row in rows:
        cells = row.items()
        if len(cells) != size:
            row.fail(f"an array of {size} numbers (the matrix has {size} rows)", f"got {len(cells)} items")
        matrix.append([cell.number(low=0.0, high=1.0) for cell in cells])
    return matrix


def _optional_matrix(node: Node, size: int, read: Callable[[Node], T]) -> list[list[T]] | None:
    """A size×size matrix field that older files lack (absent or null: None), like `distance` in shape.

    Numbers may be NaN (a standard error that could not be estimated); counts are integers ≥ 0.
    """
    if not node.given:
        return None
    rows = node.items()
    if len(rows) != size:
        node.fail(f"an array of {size} rows (like the {size}×{size} distance matrix)", f"got {len(rows)} rows")
    matrix = []
    for row in rows:
        cells = row.items()
        if len(cells) != size:
            row.fail(f"an array of {size} items (like the distance matrix)", f"got {len(cells)} items")
        matrix.append([read(cell) for cell in cells])
    return matrix


def _per_window(root: Node, blocks: int) -> tuple[list[list[float]] | None, list[int] | None]:
    """`adjacent_windows` (windows × L distances) and `window_positions` (one count ≥ 1 per window), read together.

    Older files have neither (None, None); a file with one but not the other, a row of another length than
    L, or a number of windows that disagrees with `data.windows` is refused.
    """
    rows_node, counts_node = root.key("adjacent_windows"), root.key("window_positions")
    if not rows_node.given and not counts_node.given:
        return None, None
    if not (rows_node.given and counts_node.given):
        missing = counts_node if rows_node.given else rows_node
        missing.fail("given together with " + ("adjacent_windows" if rows_node.given else "window_positions"))
    rows = []
    for row in rows_node.items():
        cells = row.items()
        if len(cells) != blocks:
            row.fail(f"an array of L = {blocks} distances (one per block)", f"got {len(cells)} items")
        rows.append([cell.number(low=0.0, high=1.0) for cell in cells])
    counts = [cell.integer(minimum=1) for cell in counts_node.items()]
    if len(counts) != len(rows):
        counts_node.fail(
            f"an array of {len(rows)} counts (one per row of adjacent_windows)", f"got {len(counts)} items"
        )
    windows = root.key("data").key("windows")
    if windows.given and isinstance(windows.value, int) and windows.value != len(rows):
        rows_node.fail(f"one row per window (data.windows = {windows.value})", f"got {len(rows)} rows")
    return rows, counts
