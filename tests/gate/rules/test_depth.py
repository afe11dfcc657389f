"""The gate's depth rules: residual growth across the stack, and an unchanged norm placement."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from factories import build_checkpoint, depth_spec

from layerprobe.core import ExportSpec, ModelSpec, ResultError
from layerprobe.export.save import run_export
from layerprobe.gate import GateRules
from layerprobe.gate.rules.depth import depth_rules
from layerprobe.gate.verdict import compare_paths, compare_results
from layerprobe.measure.depth import run_depth
from layerprobe.model.placement import summarise
from layerprobe.results import EXPORT_SCHEMA, POST_LN, DepthResult, PrunedFrom, read_pruned_from, write_json


def test_compare_rules_on_depth_results(three_block_checkpoints):
    base = run_depth(depth_spec(three_block_checkpoints["llama"], tokens=64))
    same = {r.rule: r for r in depth_rules(base, base, 1.25)}
    assert same["rms_growth"].passed and same["rms_growth"].change == pytest.approx(1.0)
    assert same["placement"].passed and same["placement"].change == 0
    blocks = [replace(b, label="Post-LN") if b.block == 0 else b for b in base.placement.blocks]
    rewired = replace(base, placement=summarise(blocks), summary={})
    verdict = compare_results(base, rewired, GateRules())
    failed = {r.rule: r for r in verdict.results if not r.passed}
    assert set(failed) == {"placement"} and failed["placement"].details["changed_blocks"] == [0]
    assert "Mix-LN, transition at 1" in failed["placement"].message
    grown = replace(base, rms=replace(base.rms, mean=[*base.rms.mean[:-1], base.rms.mean[-1] * 1.3]), summary={})
    growth = {r.rule: r for r in depth_rules(base, grown, 1.25)}["rms_growth"]
    assert not growth.passed and growth.change == pytest.approx(1.3)
    assert {r.rule: r for r in depth_rules(base, grown, 1.5)}["rms_growth"].passed
    other = replace(base, data={**base.data, "positions": "last"})
    assert compare_results(base, other, GateRules()).notes == [
        "data.positions differs: baseline 'all', candidate 'last'"
    ]


def test_a_pruned_checkpoint_keeps_its_source_placement(tmp_path):
    source = build_checkpoint("llama", tmp_path / "source", num_layers=4)
    pruned = tmp_path / "pruned"
    run_export(ExportSpec(ModelSpec(str(source), device="cpu"), str(pruned), remove="1"))
    base, cand = run_depth(depth_spec(source)), run_depth(depth_spec(pruned))
    assert base.placement.pruned_from is None
    assert cand.placement.pruned_from == PrunedFrom(str(source), 4, [0, 2, 3])
    assert cand.placement.summary == "Pre-LN in all 3 blocks" != base.placement.summary
    write_json(tmp_path / "base" / "depth.json", base.to_dict())
    write_json(tmp_path / "cand" / "depth.json", cand.to_dict())
    verdict = compare_paths(tmp_path / "base", tmp_path / "cand")
    assert verdict.passed, [r.message for r in verdict.failed]
    placement = {r.rule: r for r in verdict.results}["placement"]
    assert placement.passed and placement.details["matched_by"] == "pruned_from"
    assert placement.details["block_pairs"] == [[0, 0], [2, 1], [3, 2]]
    assert "source block it was kept from" in placement.message
    # Block 1 of the pruned model is source block 2: relabelling source block 1 (removed) changes nothing,
    # relabelling source block 2 fails on pruned block 1.
    for source_block, failed in ((1, []), (2, [1])):
        blocks = [replace(b, label=POST_LN) if b.block == source_block else b for b in base.placement.blocks]
        edited = replace(base, placement=summarise(blocks))
        rule = {r.rule: r for r in depth_rules(edited, cand, 1e9)}["placement"]
        assert rule.passed is (not failed) and rule.details["changed_blocks"] == failed
    # The same pair the other way round (baseline pruned, candidate its source) pairs the same blocks.
    assert {r.rule: r for r in depth_rules(cand, base, 1e9)}["placement"].details["block_pairs"] == [
        [0, 0],
        [1, 2],
        [2, 3],
    ]


def test_without_a_record_of_kept_blocks_placement_is_compared_as_a_multiset(three_block_checkpoints):
    base = run_depth(depth_spec(three_block_checkpoints["llama"], tokens=64))
    smaller = replace(base.placement, blocks=base.placement.blocks[:2], pruned_from=None)
    cand = replace(base, placement=summarise(smaller.blocks))
    rule = {r.rule: r for r in depth_rules(base, cand, 1e9)}["placement"]
    assert rule.passed and rule.details["matched_by"] == "multiset" and "compared as multisets" in rule.message
    post = summarise([replace(b, label=POST_LN) if b.block == 1 else b for b in smaller.blocks])
    rule = {r.rule: r for r in depth_rules(base, replace(base, placement=post), 1e9)}["placement"]
    assert not rule.passed and rule.details["labels_not_in_larger"] == {POST_LN: 1} and rule.change == 1
    assert "1 more Post-LN" in rule.message


def test_pruned_from_round_trips_and_is_validated(three_block_checkpoints):
    base = run_depth(depth_spec(three_block_checkpoints["llama"], tokens=64))
    mapped = replace(base, placement=replace(base.placement, pruned_from=PrunedFrom("org/src", 5, [0, 3, 4])))
    assert DepthResult.from_dict(mapped.to_dict()).placement.pruned_from == PrunedFrom("org/src", 5, [0, 3, 4])
    for kept in ([0, 3], [3, 0, 4], [0, 3, 5]):
        data = mapped.to_dict()
        data["placement"]["pruned_from"]["kept_blocks"] = kept
        with pytest.raises(ResultError, match="placement.pruned_from.kept_blocks"):
            DepthResult.from_dict(data)


def test_an_unreadable_or_foreign_export_record_maps_nothing(tmp_path):
    record = tmp_path / "layerprobe.json"
    assert read_pruned_from(tmp_path, 2) is None  # no record: not an export
    good = {"schema": EXPORT_SCHEMA, "source": {"id": "src"}, "num_layers": {"before": 4}, "kept_blocks": [0, 3]}
    record.write_text(json.dumps(good))
    assert read_pruned_from(tmp_path, 2) == PrunedFrom("src", 4, [0, 3])
    assert read_pruned_from(tmp_path, 3) is None  # the record describes another model
    for bad in ("{", json.dumps({**good, "kept_blocks": [3, 0]}), json.dumps({**good, "schema": "x"})):
        record.write_text(bad)
        assert read_pruned_from(tmp_path, 2) is None
