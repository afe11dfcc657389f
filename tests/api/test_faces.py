"""Every result the API returns in a notebook: `to_frame()`, `plot()`, `save(dir)`, a short repr, `_repr_html_`.

prune-drop, stability and the compare verdict (angular and depth: tests/api/test_measure.py). What `save`
writes is what the commands write: `layerprobe plot` and `report` read it, and a verdict's compare.json is
what `layerprobe compare --format json` prints.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from command_line import invoke
from factories import angular_from_walk, depth_dict, random_prune_result

import layerprobe as lp
from layerprobe.core import LayerprobeError
from layerprobe.results import DepthResult, StabilityResult, load_result, read_json, write_json


def rows_of(frame) -> list[dict]:
    return frame.to_dict("records")


def test_prune_drop_result_table_repr_and_html():
    result = random_prune_result(4, tasks=("arc_easy", "hellaswag"))
    rows = rows_of(result.to_frame())
    expected = [
        (task, name, layer, metric.pruned[i] - metric.baseline)
        for task, drop in result.tasks.items()
        for name, metric in drop.metrics.items()
        for i, layer in enumerate(metric.layers)
    ]
    assert [(r["task"], r["metric"], r["layer"]) for r in rows] == [e[:3] for e in expected]
    np.testing.assert_allclose([r["delta"] for r in rows], [e[3] for e in expected], rtol=1e-12)
    for row in rows:
        if row["ci95_low"] is not None:
            assert row["ci95_low"] <= row["delta"] <= row["ci95_high"]  # every interval contains its estimate
    text = repr(result)
    assert text.startswith("<PruneDropResult org/tiny-model: 4 blocks, arc_easy acc ") and "+1 more tasks" in text
    worst = int(np.nanargmin(result.tasks["arc_easy"].metrics["acc"].delta))
    assert f"most harmful block {worst} " in text and len(text) < 200
    assert result._repr_html_().count("<tr>") == 1 + len(rows)


@pytest.mark.slow
def test_stability_and_comparison_tables_repr_and_html():
    a, b = angular_from_walk(6, seed=1, stderr=0.01), angular_from_walk(6, seed=2, stderr=0.01)
    stability = lp.stability([a, b], draws=20)
    row = rows_of(stability.to_frame())[0]
    pair = stability.pairs[0]
    assert (row["kendall_tau_b"], row["spearman_rho"], row["jaccard_k1"]) == (
        pair.kendall_tau_b,
        pair.spearman_rho,
        pair.jaccard_lowest_k[0],
    )
    assert row["kendall_tau_b_low"] <= row["kendall_tau_b"] <= row["kendall_tau_b_high"]
    assert repr(stability).startswith("<StabilityResult org/tiny-model: 2 inputs over 6 blocks, Kendall τ-b ")

    verdict = lp.compare(a, b)
    frame = verdict.to_frame()
    assert list(frame["rule"]) == [r.name for r in verdict.results]
    assert list(frame["passed"]) == [r.passed for r in verdict.results]
    state = "pass" if verdict.passed else "regression"
    assert repr(verdict).startswith(f"<Comparison {state} (angular): ")
    assert verdict._repr_html_().count("<tr>") == 1 + len(verdict.results)


@pytest.mark.slow
def test_a_saved_prune_drop_result_is_read_by_plot_and_report(tmp_path):
    result = random_prune_result(4, tasks=("arc_easy", "hellaswag"))
    assert type(result.plot()).__name__ == "Figure"
    assert "hellaswag" in result.plot(task="hellaswag").axes[0].get_title()
    with pytest.raises(LayerprobeError, match="No task 'mmlu' in this result"):
        result.plot(task="mmlu")
    written = result.save(tmp_path / "run")
    assert [p.name for p in written] == [
        "prune_drop.json",
        "prune_drop_arc_easy.png",
        "prune_drop_arc_easy.pdf",
        "prune_drop_hellaswag.png",
        "prune_drop_hellaswag.pdf",
    ]
    assert json.dumps(load_result(written[0]).to_dict()) == json.dumps(result.to_dict())  # NaN ΔP included
    assert invoke("plot", written[0], "--out", tmp_path / "again").exit_code == 0
    assert sorted(p.name for p in (tmp_path / "again").iterdir()) == sorted(p.name for p in written[1:])
    page = invoke("report", tmp_path / "run", "--out", tmp_path / "page.html")
    assert page.exit_code == 0, page.output
    assert "arc_easy" in (tmp_path / "page.html").read_text()


@pytest.mark.slow
def test_a_saved_stability_result_is_what_the_command_writes(tmp_path):
    a, b = angular_from_walk(6, seed=1, stderr=0.01), angular_from_walk(6, seed=2, stderr=0.01)
    paths = [write_json(tmp_path / name / "angular.json", r.to_dict()) for name, r in (("a", a), ("b", b))]
    result = lp.stability(paths, draws=20)
    assert type(result.plot()).__name__ == "Figure"
    written = result.save(tmp_path / "api")
    assert [p.name for p in written] == ["stability.json", "stability.md", "stability.png", "stability.pdf"]
    cli = invoke("stability", *paths, "--draws", "20", "--out", tmp_path / "cli")
    assert cli.exit_code == 0, cli.output
    ours, theirs = read_json(written[0]), read_json(tmp_path / "cli" / "stability.json")
    assert {k: v for k, v in ours.items() if k != "run"} == {k: v for k, v in theirs.items() if k != "run"}
    assert written[1].read_text() == (tmp_path / "cli" / "stability.md").read_text()
    assert StabilityResult.from_dict(ours).pairs == result.pairs
    assert invoke("plot", written[0], "--out", tmp_path / "again").exit_code == 0


@pytest.mark.slow
def test_a_saved_verdict_is_what_compare_prints(tmp_path):
    a, b = angular_from_walk(6, seed=1, stderr=0.01), angular_from_walk(6, seed=2, stderr=0.01)
    paths = [write_json(tmp_path / name / "angular.json", r.to_dict()) for name, r in (("a", a), ("b", b))]
    verdict = lp.compare(*paths)
    assert type(verdict.plot()).__name__ == "Figure"
    written = verdict.save(tmp_path / "saved")
    assert [p.name for p in written] == ["compare.json", "compare.png", "compare.pdf"]
    cli = invoke("compare", *paths, "--format", "json", "--no-plot")
    assert cli.exit_code in (0, 1), cli.output
    assert json.loads(written[0].read_text()) == json.loads(cli.stdout)
    depth = DepthResult.from_dict(depth_dict())
    depth_only = lp.compare(depth, depth)
    with pytest.raises(LayerprobeError, match="compare draws no figure for a depth comparison"):
        depth_only.plot()
    assert [p.name for p in depth_only.save(tmp_path / "depth")] == ["compare.json"]
