"""Hostile files of an unfinished prune-drop: its progress file (--resume) and its shards (merge).

Both are read back hours after they were written, maybe edited by hand or copied half: like every result
file, a bad one is refused with one line naming the file and the JSON path (exit 2), never a KeyError.
"""

from __future__ import annotations

import json

import pytest
from factories import RUN, edited, model_info, partial_dict, shard_dict
from typer.testing import CliRunner

from layerprobe.cli.app import app
from layerprobe.core import ResultError
from layerprobe.prune.state import PruneState, check_state_paths
from layerprobe.results import PruneProgress, PruneShard, read_json, write_json

runner = CliRunner()


SHARD_CASES = [
    ("done.arc.baseline.metrics.acc.value", "x", 'done.arc.baseline.metrics.acc.value must be a number, got "x"'),
    ("done.mmlu", {}, "done.mmlu must be a task of settings.tasks (arc), got an unknown task"),
    ("done.arc", [], "done.arc must be an object, got an array of 0 items"),
    ("settings.tasks", "arc", 'settings.tasks must be an array, got "arc"'),
    ("settings.tasks", [], "settings.tasks must be an array of at least 1 item, got an array of 0 items"),
    ("settings.layers", [0, "1"], 'settings.layers[1] must be an integer ≥ 0, got "1"'),
    ("variants", None, "variants must be an array, got null"),
    ("variants", ["baseline", 0], "variants[1] must be a string, got 0"),
    ("fingerprint", [], "fingerprint must be an object, got an array of 0 items"),
    ("model", None, "model must be an object, got null"),
    ("model.num_layers", "2", 'model.num_layers must be an integer ≥ 1, got "2"'),
    ("samples.arc", "x", 'samples.arc must be an array, got "x"'),
    ("samples.arc", [3], "samples.arc[0] must be an object, got 3"),
    ("angular", 3, "angular must be a string, got 3"),
    ("run.seconds", None, "run.seconds must be a number, got null"),
    ("run", {"device": "cpu"}, "run.started_at must be present, missing"),
]


@pytest.mark.parametrize(("path", "value", "message"), SHARD_CASES, ids=[c[0] + "=" + repr(c[1]) for c in SHARD_CASES])
def test_hostile_shard_names_file_and_field(tmp_path, path, value, message):
    bad = write_json(tmp_path / "s0" / "prune_drop.shard.json", edited(shard_dict(), path, value))
    with pytest.raises(ResultError) as caught:
        PruneShard.from_dict(read_json(bad), str(bad))
    assert str(caught.value.message) == f"{bad}: {message}"
    result = runner.invoke(app, ["merge", str(tmp_path / "s0"), "--out", str(tmp_path / "merged")])
    assert result.exit_code == 2, result.output
    assert f"{bad}: {message}" in " ".join(result.stderr.split()), result.stderr
    assert "Traceback" not in result.output


def test_a_shard_round_trips_and_a_foreign_file_is_refused(tmp_path):
    path = write_json(tmp_path / "prune_drop.shard.json", shard_dict())
    shard = PruneShard.from_dict(read_json(path), str(path))
    assert shard.to_dict() == json.loads(path.read_text())
    assert shard.tasks == ["arc"] and shard.layers == [0, 1] and shard.model == model_info(2) and shard.run == RUN
    other = write_json(tmp_path / "other.json", {**shard_dict(), "schema": "layerprobe/angular@1"})
    result = runner.invoke(app, ["merge", str(other), "--out", str(tmp_path / "merged")])
    assert result.exit_code == 2 and f"{other} is not a prune-drop shard." in " ".join(result.stderr.split())


# Resume state is not a result: a damaged record is dropped (and evaluated again), never a traceback.
PARTIAL_CASES = [  # (where, new value, records dropped, records kept of the two)
    ("done.arc.1", None, 1, 1),
    ("done.arc.1.metrics", {}, 1, 1),
    ("done.arc.1.metrics.acc.value", "x", 1, 1),  # a string where a number belongs
    ("done.arc.1.metrics.acc.value", float("nan"), 1, 1),  # NaN: still valid JSON, but not what was recorded
    ("done.arc.1.metrics.acc.value", 0.75, 1, 1),  # an edited number: the checksum tells
    ("done.arc.1.engine", 3, 1, 1),
    ("done.arc.1.per_sample", {"acc": {}}, 1, 1),
    ("checks.arc.1.record", "0" * 16, 1, 1),
    ("checks.arc.1", None, 1, 1),  # no checksum: not trusted
    ("checks", [], 2, 0),
    ("done.arc", "x", 1, 0),
    ("done.arc", [1, 2], 2, 0),
    ("done", [], 1, 0),
]


@pytest.mark.parametrize(
    ("path", "value", "dropped", "remaining"), PARTIAL_CASES, ids=[c[0] + "=" + repr(c[1]) for c in PARTIAL_CASES]
)
def test_a_damaged_progress_record_is_dropped_and_counted(tmp_path, path, value, dropped, remaining):
    write_json(tmp_path / "prune_drop.partial.json", edited(partial_dict(), path, value))
    state = PruneState.open(tmp_path, {"model": "m"}, resume=True)
    assert state.damaged == dropped
    assert state.count() == remaining
    assert {k for v in state.done.values() for k in v} <= {"baseline", "1"}
    for layer in state.variants("arc"):
        assert state.get("arc", layer).metrics["acc"].value == 0.5  # what was recorded, never the edit


def test_an_unreadable_progress_file_starts_over_and_a_foreign_one_is_refused(tmp_path):
    path = tmp_path / "prune_drop.partial.json"
    path.write_bytes(bytes(range(256)) * 4)  # random bytes
    state = PruneState.open(tmp_path, {"model": "m"}, resume=True)
    assert state.count() == 0 and state.damaged == 1
    path.write_text('{"schema": "layerprobe/prune-drop-partial@1", "done": ')  # cut short
    assert PruneState.open(tmp_path, {"model": "m"}, resume=True).damaged == 1
    write_json(path, edited(partial_dict(), "fingerprint", "m"))
    with pytest.raises(ResultError, match='fingerprint must be an object, got "m"'):
        PruneState.open(tmp_path, {"model": "m"}, resume=True)
    write_json(path, {**partial_dict(), "fingerprint": {"model": "other"}})
    with pytest.raises(ResultError, match="different run"):
        PruneState.open(tmp_path, {"model": "m"}, resume=True)


def test_a_directory_in_place_of_a_state_file_is_one_line(tmp_path):
    (tmp_path / "prune_drop.partial.json").mkdir()
    with pytest.raises(ResultError, match="prune_drop.partial.json is a directory"):
        check_state_paths(tmp_path)
    (tmp_path / "prune_drop.partial.json").rmdir()
    (tmp_path / "prune_drop.answers.jsonl").mkdir()
    with pytest.raises(ResultError, match="prune_drop.answers.jsonl is a directory"):
        check_state_paths(tmp_path)
    (tmp_path / "prune_drop.answers.jsonl").rmdir()
    (tmp_path / "prune_drop.partial.samples").write_text("x")
    with pytest.raises(ResultError, match="prune_drop.partial.samples is a file"):
        check_state_paths(tmp_path)


def test_a_progress_file_round_trips(tmp_path):
    path = write_json(tmp_path / "prune_drop.partial.json", partial_dict())
    assert PruneProgress.from_dict(read_json(path), str(path)).to_dict() == json.loads(path.read_text())
    state = PruneState.open(tmp_path, {"model": "m"}, resume=True)
    assert state.damaged == 0
    assert state.variants("arc") == [None, 1] and state.get("arc", 1).metrics["acc"].value == 0.5
    write_json(tmp_path / "prune_drop.partial.json", {**partial_dict(), "schema": "layerprobe/prune-drop-shard@1"})
    with pytest.raises(ResultError, match="is not a prune-drop progress file"):
        PruneState.open(tmp_path, {"model": "m"}, resume=True)
