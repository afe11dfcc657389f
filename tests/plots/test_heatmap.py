"""Plots: the drawn arrays must be the result's numbers in the right cells, and files must be whole."""

from __future__ import annotations

import json
import math
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pytest
from matplotlib.collections import PathCollection
from matplotlib.colors import to_rgba
from matplotlib.container import BarContainer, ErrorbarContainer
from matplotlib.figure import Figure

from layerprobe.core.errors import ResultError
from layerprobe.gate import figures
from layerprobe.plots.common import HARMFUL, HELPFUL
from layerprobe.plots.delta import plot_prune_drop, prune_drop_figure
from layerprobe.plots.heatmap import angular_figure, plot_angular, span_candidates, span_matrix, span_minima
from layerprobe.plots.redraw import redraw
from layerprobe.results import (
    AngularResult,
    MetricDrop,
    ModelInfo,
    PruneDropResult,
    RunInfo,
    TaskDrop,
    angular_summary,
    load_result,
    write_json,
)
from layerprobe.results.rundir import figure_name

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
PDF_MAGIC = b"%PDF-"
RUN = RunInfo(started_at="2025-01-01T00:00:00+00:00", seconds=1.5, versions={"layerprobe": "0"}, device="cpu")


def model_info(num_layers: int, model_id: str = "org/tiny-model") -> ModelInfo:
    return ModelInfo(
        id=model_id,
        revision=None,
        commit=None,
        architecture="LlamaForCausalLM",
        model_type="llama",
        kind="causal-lm",
        dtype="float32",
        num_layers=num_layers,
        layer_path="model.layers",
        block_class="LlamaDecoderLayer",
    )


def distances(num_layers: int, seed: int, nan_cells=()) -> list[list[float]]:
    """Angular distances between the states of a random walk whose steps shrink with depth."""
    rng = np.random.default_rng(seed)
    states = [rng.normal(size=32)]
    for layer in range(num_layers):
        states.append(states[-1] + rng.normal(size=32) * np.linalg.norm(states[-1]) / (4 + layer))
    unit = np.array([s / np.linalg.norm(s) for s in states])
    matrix = (np.arccos(np.clip(unit @ unit.T, -1.0, 1.0)) / math.pi).tolist()
    for i, j in nan_cells:
        matrix[i][j] = matrix[j][i] = float("nan")
    return matrix


def angular_result(
    num_layers: int, seed: int = 0, nan_cells=(), model_id="org/tiny-model", stderr: float | None = None
) -> AngularResult:
    """With `stderr`, every entry gets a standard error of about that size (varying from cell to cell)."""
    distance = distances(num_layers, seed, nan_cells)
    errors = None
    if stderr is not None:
        rng = np.random.default_rng(seed + 1)
        errors = (stderr * rng.uniform(0.5, 1.5, size=(num_layers + 1, num_layers + 1))).tolist()
    return AngularResult(
        model=model_info(num_layers, model_id),
        data={"tokens": 4096, "positions": "all", "positions_averaged": 4000},
        distance=distance,
        nonfinite_tokens=3,
        run=RUN,
        tokens_per_second=100.0,
        distance_stderr=errors,
    )


def metric_drop(num_layers: int, seed: int = 0, higher_is_better: bool = True) -> MetricDrop:
    rng = np.random.default_rng(seed)
    pruned = [0.5 + float(rng.normal(0.0, 0.05)) for _ in range(num_layers)]
    pruned[num_layers // 2] = float("nan")
    stderr = [None if layer % 3 == 0 else 0.01 for layer in range(num_layers)]
    return MetricDrop(
        baseline=0.5,
        baseline_stderr=0.02,
        higher_is_better=higher_is_better,
        layers=list(range(num_layers)),
        pruned=pruned,
        stderr=stderr,
    )


def prune_result(num_layers: int, tasks=("arc_easy",), seed=0, higher_is_better=True) -> PruneDropResult:
    task_drops = {
        name: TaskDrop(
            metrics={
                "acc": metric_drop(num_layers, seed + k, higher_is_better),
                "acc_norm": metric_drop(num_layers, seed + 100 + k),
            },
            num_fewshot=0,
            limit=None,
            samples=100,
        )
        for k, name in enumerate(tasks)
    }
    return PruneDropResult(model=model_info(num_layers), engine="simple", settings={}, tasks=task_drops, run=RUN)


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


@pytest.fixture(autouse=True)
def no_leaked_figures():
    plt.close("all")
    yield
    assert plt.get_fignums() == [], "a figure was left open"


@pytest.mark.parametrize("num_layers", [6, 80])
def test_span_matrix_puts_each_distance_in_its_cell(num_layers):
    result = angular_result(num_layers, nan_cells=[(1, 2), (0, num_layers)])
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
    result = angular_result(num_layers, seed=num_layers, nan_cells=nan_cells)
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
        assert "4,096 tokens" in ax.get_title() and "positions=all" in ax.get_title()
        assert "org/tiny-model" in ax.get_title()
        assert any("angular distance" in other.get_ylabel() for other in fig.axes[1:])
    finally:
        plt.close(fig)


@pytest.mark.parametrize("num_layers", [6, 80])
def test_heatmap_marks_cells_not_significantly_above_the_row_minimum(num_layers):
    result = angular_result(num_layers, seed=3, nan_cells=[(1, 2)], stderr=0.01 if num_layers == 6 else 0.002)
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
    fig = angular_figure(angular_result(num_layers, seed=3))
    try:
        assert marked_candidates(fig.axes[0]) == set() and marked_minima(fig.axes[0])
    finally:
        plt.close(fig)


def test_a_paired_difference_stderr_decides_the_candidates_when_present():
    unpaired = angular_result(6, seed=3, stderr=0.01)
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


@pytest.mark.parametrize("num_layers", [6, 80])
def test_plot_angular_writes_whole_png_and_pdf(tmp_path, num_layers):
    paths = plot_angular(angular_result(num_layers, nan_cells=[(0, 1)]), tmp_path / "out")
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
        plot_angular(angular_result(6), tmp_path)
    assert (tmp_path / "angular.png").read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["angular.png"]


def delta_bars(ax) -> BarContainer:
    return next(c for c in ax.containers if isinstance(c, BarContainer) and len(c) > 1)


@pytest.mark.parametrize("higher_is_better", [True, False])
def test_prune_drop_bars_are_the_deltas_coloured_by_harm(higher_is_better):
    result = prune_result(12, higher_is_better=higher_is_better)
    metric = result.tasks["arc_easy"].metrics["acc"]  # the primary metric is the first one reported
    fig = prune_drop_figure(result, "arc_easy")
    try:
        ax = fig.axes[0]
        bars = delta_bars(ax)
        heights = [bar.get_height() for bar in bars]
        assert [bar.get_x() + bar.get_width() / 2 for bar in bars] == pytest.approx(metric.layers)
        assert heights == pytest.approx([d if math.isfinite(d) else 0.0 for d in metric.delta])
        harmful, helpful = 0, 0
        for bar, delta in zip(bars, metric.delta, strict=True):
            color = bar.get_facecolor()
            if not math.isfinite(delta) or abs(delta) < metric.baseline_stderr:
                continue
            hurts = delta < 0 if higher_is_better else delta > 0
            expected = HARMFUL if hurts else HELPFUL
            assert color == pytest.approx(to_rgba(expected))
            harmful, helpful = harmful + hurts, helpful + (not hurts)
        assert harmful and helpful
        errorbars = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
        segments = errorbars[0].lines[2][0].get_segments()
        with_stderr = [s is not None and math.isfinite(d) for s, d in zip(metric.stderr, metric.delta, strict=True)]
        assert len(segments) == sum(with_stderr)
        assert f"{metric.baseline:.4g} ± {metric.baseline_stderr:.2g}" in ax.get_title()
        assert "arc_easy" in ax.get_title() and "acc" in ax.get_title()
        band = [p for p in ax.patches if p.get_label() == "± baseline stderr"]
        assert len(band) == 1
        ys = band[0].get_path().transformed(band[0].get_patch_transform()).vertices[:, 1]
        assert (min(ys), max(ys)) == pytest.approx((-metric.baseline_stderr, metric.baseline_stderr))
    finally:
        plt.close(fig)


def test_prune_drop_file_names_are_safe_and_distinct(tmp_path):
    tasks = ("mmlu", "hendrycks/math algebra", "a/b", "a_b", "../../etc")
    paths = plot_prune_drop(prune_result(80, tasks=tasks), tmp_path)
    assert len(paths) == len(tasks) == len({p.name for p in paths})
    for path in paths:
        assert path.parent == tmp_path
        assert all(ch.isalnum() or ch in "._-" for ch in path.name), path.name
        assert file_magic(path, PNG_MAGIC)
    assert tmp_path / "prune_drop_hendrycks_math_algebra.png" in paths
    assert figure_name("mmlu/abstract algebra") == "mmlu_abstract_algebra"


@pytest.mark.parametrize("kind", ["angular", "prune_drop"])
def test_plot_result_round_trips_through_json(tmp_path, kind):
    result = angular_result(7, nan_cells=[(3, 4)]) if kind == "angular" else prune_result(7, ("mmlu/x",))
    json_path = write_json(tmp_path / f"{kind}.json", result.to_dict())
    paths = redraw(json_path)
    assert paths and all(p.parent == tmp_path for p in paths)
    expected = ["angular.png", "angular.pdf"] if kind == "angular" else ["prune_drop_mmlu_x.png"]
    assert [p.name for p in paths] == expected
    assert all(file_magic(p, PDF_MAGIC if p.suffix == ".pdf" else PNG_MAGIC) for p in paths)
    elsewhere = redraw(json_path, tmp_path / "plots")
    assert [p.parent for p in elsewhere] == [tmp_path / "plots"] * len(paths)
    if kind == "angular":  # NaN survives the JSON and lands in the same cell.
        reloaded = load_result(json_path)
        fig = angular_figure(reloaded)
        try:
            assert_drawn_matrix(fig.axes[0].images[0].get_array(), expected_cells(result.distance, 7), 7)
        finally:
            plt.close(fig)


def test_plot_result_rejects_a_file_that_is_not_a_result(tmp_path):
    (tmp_path / "x.json").write_text('{"hello": 1}')
    with pytest.raises(ResultError):
        redraw(tmp_path / "x.json")


@pytest.mark.parametrize(("base_layers", "cand_layers"), [(8, 5), (80, 60), (6, 6)])
def test_compare_angular_differences_over_the_common_layers(tmp_path, base_layers, cand_layers):
    baseline = angular_result(base_layers, seed=1, model_id="org/base")
    candidate = angular_result(cand_layers, seed=2, nan_cells=[(0, 1)], model_id="org/pruned")
    fig = figures.compare_angular_figure(baseline, candidate)
    try:
        heatmaps = [ax for ax in fig.axes if ax.images]
        assert len(heatmaps) == 3
        assert_drawn_matrix(
            heatmaps[0].images[0].get_array(), expected_cells(baseline.distance, base_layers), base_layers
        )
        assert_drawn_matrix(
            heatmaps[1].images[0].get_array(), expected_cells(candidate.distance, cand_layers), cand_layers
        )
        common = min(base_layers, cand_layers)
        diff = {
            (n, start): candidate.distance[start][start + n] - baseline.distance[start][start + n]
            for n in range(1, common + 1)
            for start in range(common - n + 1)
        }
        diff_image = heatmaps[2].images[0]
        assert_drawn_matrix(diff_image.get_array(), diff, common)
        low, high = diff_image.get_clim()
        assert low == -high and high >= max(abs(v) for v in diff.values() if math.isfinite(v))
        assert f"min L = {common}" in heatmaps[2].get_title()
        assert marked_minima(heatmaps[1]) == expected_minima(candidate.distance, cand_layers)
        assert marked_minima(heatmaps[2]) == {}
    finally:
        plt.close(fig)
    path = figures.plot_compare_angular(baseline, candidate, tmp_path / "compare.png")
    assert path == tmp_path / "compare.png" and file_magic(path, PNG_MAGIC)


def test_compare_prune_drop_with_a_pruned_candidate(tmp_path):
    baseline = prune_result(12, tasks=("arc_easy", "mmlu"), seed=0)
    candidate = prune_result(9, tasks=("mmlu", "piqa"), seed=5)
    fig = figures.compare_prune_drop_figure(baseline, candidate)
    try:
        assert len(fig.axes) == 2  # one row: mmlu is the only common task
        bars_ax, diff_ax = fig.axes
        grouped = [c for c in bars_ax.containers if isinstance(c, BarContainer)]
        base_metric = baseline.tasks["mmlu"].metrics["acc"]
        cand_metric = candidate.tasks["mmlu"].metrics["acc"]
        assert [b.get_height() for b in grouped[0]] == pytest.approx(np.nan_to_num(base_metric.delta))
        assert [b.get_height() for b in grouped[1]] == pytest.approx(np.nan_to_num(cand_metric.delta))
        expected = [c - b for b, c in zip(base_metric.delta[:9], cand_metric.delta, strict=True)]
        diff_bars = delta_bars(diff_ax)
        assert [b.get_x() + b.get_width() / 2 for b in diff_bars] == pytest.approx(range(9))
        assert [b.get_height() for b in diff_bars] == pytest.approx(np.nan_to_num(expected))
        assert "mmlu" in bars_ax.get_title()
    finally:
        plt.close(fig)
    path = figures.plot_compare_prune_drop(baseline, candidate, tmp_path / "compare.png")
    assert file_magic(path, PNG_MAGIC)


def test_compare_prune_drop_without_a_common_task_is_a_user_error(tmp_path):
    with pytest.raises(ResultError, match="share no task"):
        figures.plot_compare_prune_drop(prune_result(4, ("a",)), prune_result(4, ("b",)), tmp_path / "c.png")
    assert not (tmp_path / "c.png").exists()


def test_summary_skips_unmeasured_entries_and_says_so():
    result = angular_result(6, seed=5, nan_cells=[(2, 3), (0, 6)], stderr=0.01)
    d = result.distance
    d[2][3] = d[3][2] = float("nan")
    summary = angular_summary(d, stderr=result.distance_stderr)
    adjacent = [d[l][l + 1] for l in range(6)]
    finite = [v for v in adjacent if math.isfinite(v)]
    assert summary["mean_adjacent"] == pytest.approx(sum(finite) / len(finite))
    assert summary["unmeasured"] == [[0, 6], [2, 3]]
    assert "6" not in summary["most_redundant"]  # its only cell is unmeasured
    best = min((v, l) for l, v in enumerate(adjacent) if math.isfinite(v))
    assert summary["most_redundant"]["1"]["layer"] == best[1] != 2
    assert 2 not in summary["most_redundant"]["1"]["candidates"]
    assert summary["adjacent_stderr"] == [result.distance_stderr[l][l + 1] for l in range(6)]


def test_console_summary_never_calls_an_unmeasured_pair_most_similar(monkeypatch):
    import io

    from rich.console import Console

    from layerprobe.cli import summaries

    result = angular_result(4, seed=5, nan_cells=[(0, 1), (1, 2), (2, 3), (3, 4)], stderr=0.01)
    printed = {"out": io.StringIO(), "err": io.StringIO()}
    for name, stream in printed.items():
        monkeypatch.setattr(summaries, name, Console(file=stream, width=200))
    summaries.print_angular_summary(result)
    out, err = printed["out"].getvalue(), printed["err"].getvalue()
    assert "no adjacent pair could be measured" in out and "d = nan" not in out.lower()
    assert out.count("unmeasured") == 4
    assert "4 entries could not be measured" in err and "d(x^0, x^1)" in err

    result = angular_result(6, seed=3, stderr=0.01)
    printed = {"out": io.StringIO(), "err": io.StringIO()}
    for name, stream in printed.items():
        monkeypatch.setattr(summaries, name, Console(file=stream, width=200))
    summaries.print_angular_summary(result)
    choice = angular_summary(result.distance, stderr=result.distance_stderr)["most_redundant"]["1"]
    line = next(line for line in printed["out"].getvalue().splitlines() if "most similar" in line)
    assert f"x^{choice['layer']} → x^{choice['layer'] + 1}" in line
    assert f"± {choice['stderr']:.4f}" in line
    assert ("a clear choice" in line) == choice["clear"] and ("not clear" in line) == (not choice["clear"])


def test_angular_json_round_trips_the_new_fields_and_reads_old_files(tmp_path):
    result = angular_result(5, seed=2, nan_cells=[(1, 2)], stderr=0.01)
    counts = [[0] * 6 for _ in range(6)]
    counts[1][2] = counts[2][1] = 7
    paired = [[0.001 * (i + j) for j in range(6)] for i in range(6)]
    result = AngularResult(**{**result.__dict__, "nonfinite_positions": counts, "row_difference_stderr": paired})
    data = result.to_dict()
    assert list(data)[:8] == [
        "schema",
        "model",
        "data",
        "distance",
        "distance_stderr",
        "row_difference_stderr",
        "nonfinite_tokens",
        "nonfinite_positions",
    ]
    write_json(tmp_path / "new.json", data)
    again = load_result(tmp_path / "new.json")
    assert again.distance_stderr == result.distance_stderr and again.nonfinite_positions == counts
    assert again.row_difference_stderr == paired and again.summary["candidates_test"] == "paired"
    assert again.summary["most_redundant"]["1"]["clear"] in (True, False)

    old = dict(data)
    for key in ("distance_stderr", "row_difference_stderr", "nonfinite_positions", "summary"):
        del old[key]  # a file written before these fields existed
    write_json(tmp_path / "old.json", old)
    legacy = load_result(tmp_path / "old.json")
    assert legacy.distance_stderr is None and legacy.nonfinite_positions is None
    assert legacy.row_difference_stderr is None and legacy.summary["candidates_test"] is None
    choice = legacy.summary["most_redundant"]["1"]
    assert choice["clear"] is None and choice["candidates"] is None and choice["stderr"] is None
    assert span_candidates(legacy) == {}

    bad = dict(data, distance_stderr=[[0.1] * 6] * 5)
    write_json(tmp_path / "bad.json", bad)
    with pytest.raises(ResultError, match="6×6"):
        load_result(tmp_path / "bad.json")


def test_an_evaluation_round_trips_through_its_json_form():
    from layerprobe.results.evaluation import Evaluation, MetricScore, evaluation_from_dict, evaluation_to_dict

    evaluation = Evaluation(
        {"f1": MetricScore(71.5, 2.25, True, 6), "em": MetricScore(50.0, None, None, 6)}, 0, 6, "simple", 2
    )
    data = json.loads(json.dumps(evaluation_to_dict(evaluation)))
    assert data["metrics"]["em"] == {"value": 50.0, "stderr": None, "higher_is_better": None}
    assert evaluation_from_dict(data) == evaluation


def test_atomic_write_leaves_nothing_behind_when_writing_fails(tmp_path):
    from layerprobe.results import atomic_write

    target = tmp_path / "kept.json"
    target.write_text("old")

    def half_then_fail(tmp):
        tmp.write_text("half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        atomic_write(target, half_then_fail)
    assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["kept.json"]
