"""The gate's depth rules: residual growth across the stack, and an unchanged norm placement."""

from __future__ import annotations

from dataclasses import replace

import pytest
from factories import depth_spec

from layerprobe.gate import GateRules
from layerprobe.gate.rules.depth import depth_rules
from layerprobe.gate.verdict import compare_results
from layerprobe.measure.depth import run_depth
from layerprobe.model.placement import summarise


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
