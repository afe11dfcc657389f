"""Hostile result JSON: `compare` and `plot` answer one red line naming the file and the JSON path, exit 2.

Exit 1 is what CI reads as "regression", so a crash on a bad file (a traceback, exit 1) would be read as a
verdict. Every file here is a valid result written by the library, then edited the way a hand, a truncating
upload or another tool would; the expected message names the field that was broken.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from command_line import invoke
from factories import angular_dict, curve_dict, curve_dict_v2, depth_dict, edited, prune_dict

from layerprobe.core.errors import ResultError
from layerprobe.prune.state import PruneState
from layerprobe.results import load_result, write_json

ANGULAR_CASES = [
    ("distance.1", [0.1, 0.0], "distance[1] must be an array of 4 numbers (the matrix has 4 rows), got 2 items"),
    ("distance", [[0.0]], "distance must be an (L+1)×(L+1) matrix with L ≥ 1 block, got 1 row"),
    ("distance", [], "distance must be an (L+1)×(L+1) matrix with L ≥ 1 block, got 0 rows"),
    ("distance.2", "0.3", 'distance[2] must be an array, got "0.3"'),
    ("model", None, "model must be an object, got null"),
    ("data", None, "data must be an object, got null"),
    ("data.tokens", "12", 'data.tokens must be an integer ≥ 1, got "12"'),
    ("data.tokens", 1.5, "data.tokens must be an integer ≥ 1, got 1.5"),
    ("model.id", 7, "model.id must be a string, got 7"),
    ("model.num_layers", 9, "model.num_layers must be L = 3 to match the 4×4 distance matrix, got 9"),
    ("nonfinite_tokens", -1, "nonfinite_tokens must be an integer ≥ 0, got -1"),
    ("run", [], "run must be an object, got an array of 0 items"),
    ("run.versions", {"torch": 2}, "run.versions.torch must be a string, got 2"),
    (
        "distance_stderr",
        [[0.0]],
        "distance_stderr must be an array of 4 rows (like the 4×4 distance matrix), got 1 rows",
    ),
    ("nonfinite_positions", [[0, 0, 0, "1"]] * 4, 'nonfinite_positions[0][3] must be an integer ≥ 0, got "1"'),
]


@pytest.mark.parametrize(
    ("path", "value", "message"), ANGULAR_CASES, ids=[c[0] + "=" + repr(c[1]) for c in ANGULAR_CASES]
)
def test_hostile_angular_json_names_file_and_field(tmp_path, path, value, message):
    good = write_json(tmp_path / "good" / "angular.json", angular_dict())
    bad = write_json(tmp_path / "bad" / "angular.json", edited(angular_dict(), path, value))
    with pytest.raises(ResultError) as caught:
        load_result(bad)
    assert str(caught.value.message) == f"{bad}: {message}"
    for args in (("compare", good, bad, "--no-plot"), ("compare", bad, good, "--no-plot"), ("plot", bad)):
        result = invoke(*args)
        assert result.exit_code == 2, result.output
        assert f"{bad}: {message}" in " ".join(result.stderr.split()), result.stderr
        assert "Traceback" not in result.output


def test_distance_cells_must_be_numbers_and_within_0_1(tmp_path):
    for value, message in (("x", 'a number, got "x"'), (None, "a number, got null"), (2.0, "a number in [0, 1]")):
        bad = write_json(tmp_path / "a.json", edited(angular_dict(), "distance.1", [0.1, 0.0, value, 0.4]))
        with pytest.raises(ResultError, match=r"distance\[1\]\[2\] must be " + message.replace("[", r"\[")):
            load_result(bad)
    nan = write_json(tmp_path / "nan.json", edited(angular_dict(), "distance.1", [0.1, 0.0, float("nan"), 0.4]))
    assert load_result(nan).distance[1][2] != load_result(nan).distance[1][2]  # a recorded NaN stays readable


PRUNE_CASES = [
    ("tasks", [], "tasks must be an object, got an array of 0 items"),
    ("tasks", {}, "tasks must be a non-empty object, got an object of 0 members"),
    ("tasks.arc.metrics", {}, "tasks.arc.metrics must be a non-empty object, got an object of 0 members"),
    ("tasks.arc.metrics.acc.baseline", None, "tasks.arc.metrics.acc.baseline must be a number, got null"),
    ("tasks.arc.metrics.acc.baseline", "0.5", 'tasks.arc.metrics.acc.baseline must be a number, got "0.5"'),
    ("tasks.arc.metrics.acc.pruned", [0.2, 0.4], "tasks.arc.metrics.acc.pruned must be an array of 3 items"),
    ("tasks.arc.metrics.acc.stderr", [0.1, "x", 0.1], 'tasks.arc.metrics.acc.stderr[1] must be a number, got "x"'),
    ("tasks.arc.metrics.acc.layers", [0, 1, 7], "tasks.arc.metrics.acc.layers must be block indices below L = 3"),
    ("tasks.arc.metrics.acc.higher_is_better", "yes", 'higher_is_better must be true or false, got "yes"'),
    ("tasks.arc.num_fewshot", 1.5, "tasks.arc.num_fewshot must be an integer ≥ 0, got 1.5"),
    ("model", None, "model must be an object, got null"),
    ("settings.limit", "all", 'settings.limit must be a number, got "all"'),
    ("tasks.arc.metrics.acc.delta_stderr", [0.1], "tasks.arc.metrics.acc.delta_stderr must be an array of 3 items"),
    ("tasks.arc.metrics.acc.delta_ci95", [[-1, 1], [0], None], "delta_ci95[1] must be null or an array [low, high]"),
    ("tasks.arc.agreement", "high", 'tasks.arc.agreement must be an object, got "high"'),
    ("tasks.arc.agreement", {"acc": 3}, "tasks.arc.agreement.acc must be an object, got 3"),
    ("settings.span", "2", 'settings.span must be an integer ≥ 1, got "2"'),
    ("settings.unit", None, "settings.unit must be a string, got null"),
]


@pytest.mark.parametrize(("path", "value", "message"), PRUNE_CASES, ids=[c[0] + "=" + repr(c[1]) for c in PRUNE_CASES])
def test_hostile_prune_drop_json_names_file_and_field(tmp_path, path, value, message):
    good = write_json(tmp_path / "good" / "prune_drop.json", prune_dict())
    bad = write_json(tmp_path / "bad" / "prune_drop.json", edited(prune_dict(), path, value))
    for args in (("compare", good, bad, "--no-plot"), ("plot", bad)):
        result = invoke(*args)
        assert result.exit_code == 2, result.output
        assert message in " ".join(result.stderr.split()), result.stderr
        assert str(bad) in result.stderr.replace("\n", "")


def test_deeply_nested_json_is_refused_not_a_recursion_error(tmp_path):
    bad = tmp_path / "angular.json"
    bad.write_text('{"schema": "layerprobe/angular@1", "model": ' + "[" * 200_000 + "]" * 200_000 + "}")
    result = invoke("plot", bad)
    assert result.exit_code == 2, result.output
    assert "nested too deeply" in result.stderr


def test_stored_summary_is_recomputed_not_trusted(tmp_path):
    data = edited(angular_dict(), "summary", {"adjacent": "rubbish", "lazy_layers": 5})
    result = load_result(write_json(tmp_path / "a.json", data))
    assert result.summary["adjacent"] == [0.1, 0.2, 0.2]
    assert result.summary["lazy_layers"] == [0]  # 0.2 is not below the 0.2 threshold


def test_valid_files_round_trip_unchanged(tmp_path):
    for name, data in (("angular.json", angular_dict()), ("prune_drop.json", prune_dict())):
        path = write_json(tmp_path / name, data)
        assert load_result(path).to_dict() == json.loads(path.read_text())


def test_compare_verdict_json_is_named_for_what_it_is(tmp_path):
    bad = tmp_path / "verdict.json"
    bad.write_text(json.dumps({"schema": "layerprobe/compare@1", "passed": True}))
    result = invoke("plot", bad)
    assert result.exit_code == 2 and "compare's verdict" in result.stderr


def test_resume_file_with_a_bad_entry_drops_it_and_a_bad_fingerprint_is_named(tmp_path):
    partial = {
        "schema": "layerprobe/prune-drop-partial@1",
        "fingerprint": {"model": "m"},
        "done": {"arc": {"baseline": {"metrics": {"acc": {"value": "0.5", "stderr": None}}, "samples": 3}}},
    }
    write_json(tmp_path / "prune_drop.partial.json", partial)
    state = PruneState.open(tmp_path, {"model": "m"}, resume=True)  # resume state: the entry is evaluated again
    assert state.damaged == 1 and not state.has("arc", None)
    write_json(tmp_path / "prune_drop.partial.json", {**partial, "fingerprint": ["m"]})
    with pytest.raises(ResultError, match=r"fingerprint must be an object, got an array of 1 item"):
        PruneState.open(tmp_path, {"model": "m"}, resume=True)


def test_plot_out_that_is_an_existing_file_is_refused(tmp_path):
    path = write_json(tmp_path / "angular.json", angular_dict())
    blocker = tmp_path / "taken"
    blocker.write_text("not a directory")
    result = invoke("plot", path, "--out", blocker)
    assert result.exit_code == 2, result.output
    assert "--out" in result.stderr and str(blocker) in result.stderr.replace("\n", "")
    assert blocker.read_text() == "not a directory"


def test_paths_with_brackets_survive_in_messages(tmp_path):
    missing = Path(tmp_path) / "[angular]" / "angular.json"
    result = invoke("plot", missing)
    assert result.exit_code == 2
    assert "[angular]" in result.stderr


DEPTH_CASES = [
    ("residual.rms.mean", "x", 'residual.rms.mean must be an array, got "x"'),
    ("residual.rms.mean", [1.0], "residual.rms.mean must be an array of L+1 = 3 items, got 1 items"),
    ("placement", None, "placement must be an object, got null"),
    ("placement.blocks", [], "placement.blocks must be an array of L = 2 blocks, got 0 items"),
    ("grad.block", [0.1], "grad.block must be an array of L = 2 items, got 1 items"),
    ("sublayers.attention.modules", ["a0"], "sublayers.attention.modules must be an array of L = 2 items"),
    ("update.relative.count", [8, -1], "update.relative.count[1] must be an integer ≥ 0, got -1"),
    ("placement.blocks.0.label", 5, "placement.blocks[0].label must be a string, got 5"),
    ("placement.blocks.0.norms", {"ln": 1}, "placement.blocks[0].norms.ln must be a string, got 1"),
    (
        "placement.blocks.1.attention",
        {"module": "a"},
        "placement.blocks[1].attention.residual must be present, missing",
    ),
    ("placement.transition", -1, "placement.transition must be an integer ≥ 0, got -1"),
    ("grad.block", [0.1, None], "grad.block[1] must be a number, got null"),
    ("grad.loss", None, "grad.loss must be a string, got null"),
]


@pytest.mark.parametrize(("path", "value", "message"), DEPTH_CASES, ids=[c[0] + "=" + repr(c[1]) for c in DEPTH_CASES])
def test_hostile_depth_json_names_file_and_field(tmp_path, path, value, message):
    good = write_json(tmp_path / "good" / "depth.json", depth_dict())
    assert load_result(good).to_dict() == json.loads(good.read_text())
    bad = write_json(tmp_path / "bad" / "depth.json", edited(depth_dict(), path, value))
    for args in (("compare", good, bad, "--no-plot"), ("plot", bad)):
        result = invoke(*args)
        assert result.exit_code == 2, result.output
        assert f"{bad}: {message}" in " ".join(result.stderr.split()), result.stderr


def test_angular_out_that_is_an_existing_file_is_refused_before_any_work(tmp_path):
    blocker = tmp_path / "taken"
    blocker.write_text("not a directory")
    result = invoke("angular", "org/not-loaded", "--dataset", "builtin:pydoc", "--out", blocker / "sub", "--quiet")
    assert result.exit_code == 2, result.output
    assert f"{blocker} is an existing file" in " ".join(result.stderr.split())


# --- prune_curve.json --------------------------------------------------------------------------------
ANGULAR_METHOD = "tasks.corpus.nll.methods.angular"
CURVE_CASES = [
    ("tasks", [], "tasks must be an object, got an array of 0 items"),
    ("tasks", {}, "tasks must be a non-empty object, got an object of 0 members"),
    ("tasks.corpus", {}, "tasks.corpus must be a non-empty object, got an object of 0 members"),
    ("tasks.corpus.nll.baseline", "3", 'tasks.corpus.nll.baseline must be a number, got "3"'),
    ("tasks.corpus.nll.higher_is_better", None, "tasks.corpus.nll.higher_is_better must be true or false, got null"),
    ("tasks.corpus.nll.methods", {}, "tasks.corpus.nll.methods must be a non-empty object, got an object of 0 members"),
    (
        f"{ANGULAR_METHOD}.score",
        [3.1],
        f"{ANGULAR_METHOD}.score must be an array of 2 items (one per entry of n), got 1",
    ),
    (f"{ANGULAR_METHOD}.delta_stderr", [0.1, "x"], f'{ANGULAR_METHOD}.delta_stderr[1] must be a number, got "x"'),
    (f"{ANGULAR_METHOD}.n", [1, 9], f"{ANGULAR_METHOD}.n[1] must be a number of blocks in 1 … L = 4, got 9"),
    (f"{ANGULAR_METHOD}.n", [0, 2], f"{ANGULAR_METHOD}.n[0] must be an integer ≥ 1, got 0"),
    (f"{ANGULAR_METHOD}.start", [2, 3], f"{ANGULAR_METHOD}.start[1] must be a start in 0 … L − n = 2"),
    (ANGULAR_METHOD, {"n": [1]}, f"{ANGULAR_METHOD}.start must be present, missing"),
    ("selection.n", 3, "selection.n must be an array, got 3"),
    ("settings", "x", 'settings must be an object, got "x"'),
    ("model.num_layers", 0, "model.num_layers must be an integer ≥ 1, got 0"),
    ("run", None, "run must be an object, got null"),
]


@pytest.mark.parametrize(("path", "value", "message"), CURVE_CASES, ids=[c[0] + "=" + repr(c[1]) for c in CURVE_CASES])
def test_hostile_prune_curve_json_names_file_and_field(tmp_path, path, value, message):
    bad = write_json(tmp_path / "bad" / "prune_curve.json", edited(curve_dict(), path, value))
    with pytest.raises(ResultError) as caught:
        load_result(bad)
    assert str(caught.value.message).startswith(f"{bad}: {message}")
    good = write_json(tmp_path / "good" / "prune_curve.json", curve_dict())
    for args in (("plot", bad), ("compare", bad, good, "--no-plot")):
        result = invoke(*args)
        assert result.exit_code == 2, result.output
        assert f"{bad}: {message}" in " ".join(result.stderr.split()), result.stderr
        assert "Traceback" not in result.output


SET = "methods.angular.sets.2"
CURVE_V2_CASES = [
    ("methods", {}, "methods must be a non-empty object, got an object of 0 members"),
    ("methods.angular.unit", "layer", 'methods.angular.unit must be "block" or "sublayer", got \'layer\''),
    ("methods.angular.sets", {}, "methods.angular.sets must be a non-empty object"),
    (f"{SET}.blocks", [1, 9], f"{SET}.blocks[1] must be a distinct block index in 0 … 3, got 9"),
    (f"{SET}.blocks", [1, 1], f"{SET}.blocks[1] must be a distinct block index in 0 … 3, got 1"),
    (f"{SET}.blocks", [1], f"{SET} must be a set of 2 units, got 1"),
    (f"{SET}.sublayers", [[1, "ffn"]], f'{SET}.sublayers[0] must be a distinct [block in 0 … 3, "attention" or "mlp"]'),
    (f"{SET}.sublayers", [[1]], f'{SET}.sublayers[0] must be a pair [block, "attention" or "mlp"], got 1 items'),
    (f"{SET}.scores.corpus.nll.delta", "x", f'{SET}.scores.corpus.nll.delta must be a number, got "x"'),
    (f"{SET}.scores.corpus.nll.delta_ci95", [1], f"{SET}.scores.corpus.nll.delta_ci95 must be null or an array"),
    (f"{SET}.scores.corpus", {"kl": {}}, f"{SET}.scores.corpus.kl.value must be present"),
    ("baseline.corpus.nll.value", None, "baseline.corpus.nll.value must be a number, got null"),
]


@pytest.mark.parametrize(
    ("path", "value", "message"), CURVE_V2_CASES, ids=[c[0] + "=" + repr(c[1]) for c in CURVE_V2_CASES]
)
def test_hostile_prune_curve_v2_names_file_and_field(tmp_path, path, value, message):
    bad = write_json(tmp_path / "prune_curve.json", edited(curve_dict_v2(), path, value))
    with pytest.raises(ResultError) as caught:
        load_result(bad)
    assert str(caught.value.message).startswith(f"{bad}: {message}"), caught.value.message


def test_a_v2_set_must_score_every_baseline_metric(tmp_path):
    data = curve_dict_v2()
    data["baseline"]["corpus"]["kl"] = dict(data["baseline"]["corpus"]["nll"])
    with pytest.raises(ResultError, match=r"methods.angular.sets.1.scores must be a score of every baseline metric"):
        load_result(write_json(tmp_path / "prune_curve.json", data))


def test_prune_curve_round_trips_and_plots(tmp_path):
    path = write_json(tmp_path / "prune_curve.json", curve_dict_v2())
    assert load_result(path).to_dict() == json.loads(path.read_text())
    old = load_result(write_json(tmp_path / "old" / "prune_curve.json", curve_dict()))  # @1 still reads, the same
    assert old.to_dict() == json.loads(path.read_text())
    assert old.methods["angular"].sets[2].blocks == [1, 2] and old.methods["last"].sets[1].start == 2
    result = invoke("plot", path)
    assert result.exit_code == 0, result.output
    assert (tmp_path / "prune_curve_corpus.png").read_bytes()[:4] == b"\x89PNG"
    assert (tmp_path / "prune_curve_corpus.pdf").read_bytes()[:4] == b"%PDF"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # written atomically


def test_compare_refuses_pruning_curves_in_one_line(tmp_path):
    """Curves have no gate rules: read as another kind they used to crash with exit 1, read by CI as a regression."""
    path = write_json(tmp_path / "prune_curve.json", curve_dict())
    result = invoke("compare", path, path, "--no-plot")
    assert result.exit_code == 2, result.output
    said = " ".join(result.stderr.split())
    assert "compare gates angular, prune-drop, depth and heal results, not a pruning curve" in said
    assert "Traceback" not in result.output


def test_a_shard_passed_to_plot_says_what_it_is(tmp_path):
    bad = tmp_path / "prune_drop.shard.json"
    bad.write_text(json.dumps({"schema": "layerprobe/prune-drop-shard@1"}))
    result = invoke("plot", bad)
    assert result.exit_code == 2 and "layerprobe merge" in result.stderr
