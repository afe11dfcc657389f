"""track.json read back: validated field by field like every result kind; its file names live in RunDir."""

from __future__ import annotations

import copy
import json

import pytest
from typer.testing import CliRunner

from layerprobe.cli.app import app
from layerprobe.core import ResultError
from layerprobe.results import RunDir, TrackResult, load_result, read_json
from layerprobe.results.io import SCHEMAS


@pytest.fixture(scope="module")
def track_json(review_runs, tmp_path_factory):
    out = tmp_path_factory.mktemp("track-json")
    result = CliRunner().invoke(app, ["track", *map(str, review_runs.scrambled), "--out", str(out), "-q"])
    assert result.exit_code == 0, result.output
    return read_json(out / "track.json")


def test_the_names_and_the_schema_are_registered(tmp_path):
    run = RunDir(tmp_path)
    assert (run.track_json.name, run.track_md.name, run.report_html.name) == ("track.json", "track.md", "report.html")
    assert run.plot("track", "lazy").name == "track_lazy.png"
    assert run.plot("track", "heat", suffix="pdf").name == "track_heat.pdf"
    assert "layerprobe/track@1" in SCHEMAS


def test_a_written_history_reads_back_equal(track_json):
    result = TrackResult.from_dict(track_json, "track.json")
    assert result.to_dict() == track_json
    assert [run.step for run in result.runs] == [1000, 2000, 3000]
    assert result.kinds == ["angular", "prune_drop", "depth", "prune_curve"]


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d.update(schema="layerprobe/angular@1"), "expected a layerprobe/track@1 result"),
        (lambda d: d.update(order="random"), 'order must be "step" or "given"'),
        (lambda d: d.update(runs=[]), "runs must be an array of at least 1 item"),
        (lambda d: d["runs"][0].update(num_layers=0), r"runs\[0\].num_layers must be an integer ≥ 1"),
        (lambda d: d["runs"][0].update(positions=[0.0]), r"runs\[0\].positions must be an array of num_layers = 4"),
        (lambda d: d["runs"][0]["angular"].update(lazy_count="4"), r"runs\[0\].angular.lazy_count must be an integer"),
        (lambda d: d["runs"][0]["angular"].update(stderr_method="guess"), "stderr_method must be"),
        (lambda d: d["runs"][0]["angular"].update(adjacent_stderr=[0.1]), "adjacent_stderr must be an array of 4"),
        (
            lambda d: d["runs"][0]["prune_drop"]["lp_arc_like"]["watched"][0].update(delta_ci95=[1.0]),
            "delta_ci95 must be null or an array",
        ),
        (
            lambda d: d["runs"][1]["depth"].update(grad=[1.0, 2.0]),
            r"runs\[1\].depth.grad must be an array of num_layers = 4",
        ),
        (lambda d: d["runs"][2]["prune_curve"]["corpus"]["methods"]["angular"].update(fraction=[2.0]), "fraction"),
        (lambda d: d["runs"][0].update(step_from="guess"), 'step_from must be "revision", "directory" or null'),
    ],
)
def test_a_bad_field_is_one_error_naming_its_path(track_json, edit, message):
    data = copy.deepcopy(track_json)
    edit(data)
    with pytest.raises(ResultError, match=message) as caught:
        TrackResult.from_dict(data, "t/track.json")
    assert caught.value.message.startswith("t/track.json")


def test_track_json_is_not_a_result_the_single_run_commands_take(tmp_path, track_json):
    path = tmp_path / "track.json"
    path.write_text(json.dumps(track_json))
    with pytest.raises(ResultError, match="unknown result schema 'layerprobe/track@1'"):
        load_result(path)
