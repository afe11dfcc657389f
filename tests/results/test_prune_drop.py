"""prune_drop.json: the paired fields round trip and older files read back; the label of a variant."""

from __future__ import annotations

import json

from factories import GATE_PRUNED, acc_drop, arc_result

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
