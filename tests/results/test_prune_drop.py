"""prune_drop.json: the paired fields round trip and older files read back; the label of a variant."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from factories import GATE_PRUNED, acc_drop, arc_result

from layerprobe.core import ResultError
from layerprobe.results import load_result, variant_label, write_json

PRUNED = GATE_PRUNED


def test_old_files_read_back_without_paired_fields_and_new_ones_round_trip(tmp_path):
    new = arc_result(acc_drop(PRUNED, [0.01, 0.02, None, 0.03]))
    path = write_json(tmp_path / "new.json", new.to_dict())
    back = load_result(path).tasks["arc"].metrics["acc"]
    assert back.paired and back.delta_stderr == [0.01, 0.02, None, 0.03]
    assert back.significant == new.tasks["arc"].metrics["acc"].significant
    old = new.to_dict()
    for field in ("delta_stderr", "delta_ci95", "significant", "delta_method", "bootstrap"):
        old["tasks"]["arc"]["metrics"]["acc"].pop(field)
    old["summary"] = {}
    (tmp_path / "old.json").write_text(json.dumps(old))
    legacy = load_result(tmp_path / "old.json")
    assert not legacy.tasks["arc"].metrics["acc"].paired
    assert legacy.summary["arc"]["significant_layers"] is None
    assert new.to_dict()["summary"]["arc"]["significant_layers"] == [0, 1]


def test_variant_label_names_what_was_removed():
    assert variant_label({}) == "removed block"  # results written before --unit/--span
    assert variant_label({"unit": "attention", "span": 1}) == "attention removed (block)"
    assert variant_label({"unit": "block", "span": 3}) == "removed blocks l…l+2 (start l)"


def sequential_acc(pruned=PRUNED):
    """A sequential run's metric: items, stop and the anytime interval of each variant."""
    drop = acc_drop(pruned, [0.01, 0.02, 0.01, 0.03])
    deltas = drop.delta
    return replace(
        drop,
        items=[40, 120, 40, 400],
        stop=["settled", "precision", "settled", "exhausted"],
        delta_cs95=[[d - 0.1, d + 0.08] for d in deltas],
    )


def test_sequential_fields_round_trip_and_the_interval_shown_is_the_anytime_one(tmp_path):
    result = arc_result(sequential_acc())
    data = result.to_dict()
    assert data["schema"] == "layerprobe/prune-drop@2"
    back = load_result(write_json(tmp_path / "seq.json", data)).tasks["arc"].metrics["acc"]
    assert back.sequential and back.items == [40, 120, 40, 400] and back.stop[3] == "exhausted"
    assert back.interval95 == back.delta_cs95 != back.delta_ci95
    plain = load_result(write_json(tmp_path / "plain.json", arc_result(acc_drop(PRUNED, [0.01] * 4)).to_dict()))
    metric = plain.tasks["arc"].metrics["acc"]
    assert not metric.sequential and metric.interval95 == metric.delta_ci95


def test_version_1_files_still_read_and_bad_sequential_fields_are_named(tmp_path):
    data = arc_result(acc_drop(PRUNED, [0.01] * 4)).to_dict()
    data["schema"] = "layerprobe/prune-drop@1"
    for field in ("items", "stop", "delta_cs95"):
        data["tasks"]["arc"]["metrics"]["acc"].pop(field)
    (tmp_path / "v1.json").write_text(json.dumps(data))
    assert load_result(tmp_path / "v1.json").tasks["arc"].metrics["acc"].delta_cs95 is None
    bad = arc_result(sequential_acc()).to_dict()
    bad["tasks"]["arc"]["metrics"]["acc"]["stop"][1] = "bored"
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    with pytest.raises(ResultError, match=r"tasks\.arc\.metrics\.acc\.stop\[1\]"):
        load_result(tmp_path / "bad.json")
    data["schema"] = "layerprobe/prune-drop@3"
    (tmp_path / "v3.json").write_text(json.dumps(data))
    with pytest.raises(ResultError, match="prune-drop@3"):
        load_result(tmp_path / "v3.json")
