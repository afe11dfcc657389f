"""`compare` on two heal.json: the healed model stays within --max-heal-gap of its own original.

The bound is recomputed here from the per-window values the factory draws (paired differences, their
sample stderr, + 1.645 stderr), independently of the summary heal.json stores.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from command_line import invoke
from factories import heal_result

from layerprobe.gate import compare_paths
from layerprobe.gate.rules.thresholds import load_rules
from layerprobe.results import RunDir, write_json


def _write(directory, result):
    directory.mkdir(parents=True, exist_ok=True)
    return write_json(RunDir(directory).heal_json, result.to_dict())


def _bound(result, metric):
    entry = result.metrics[metric]
    d = entry["healed_delta"]
    gap = -d["value"] if entry["higher_is_better"] else d["value"]
    return gap + 1.6448536269514722 * d["stderr"]


def test_heal_gap_is_the_one_sided_bound_of_the_paired_difference(tmp_path):
    base, cand = heal_result(), heal_result(shift=0.2, seed=1)
    # the test's own stderr of the healed − original NLL from the values the factory draws
    rng = np.random.default_rng(1)
    nll = rng.normal(3.0, 0.2, 12)
    rng.normal(0, 0.05, 12), rng.normal(0, 0.05, 12), rng.normal(0, 0.02, 12)
    diff = (nll + 0.3 + rng.normal(0, 0.02, 12)) - nll
    mine = diff.mean() + 1.6448536269514722 * diff.std(ddof=1) / math.sqrt(12)
    assert _bound(cand, "nll") == pytest.approx(mine)
    b, c = _write(tmp_path / "base", base), _write(tmp_path / "cand", cand)
    verdict = compare_paths(b, c, load_rules(max_heal_gap=0.25))
    (rule,) = verdict.results
    assert rule.rule == "heal_gap" and rule.subject == "nll" and not verdict.passed
    assert rule.candidate == pytest.approx(mine) and rule.baseline == pytest.approx(_bound(base, "nll"))
    assert compare_paths(b, c, load_rules(max_heal_gap=0.4)).passed
    top1 = compare_paths(b, c, load_rules(max_heal_gap=0.25, heal_metric="top1_agreement")).results[0]
    assert top1.candidate == pytest.approx(_bound(cand, "top1_agreement")) and top1.candidate > 0.25


def test_no_margin_no_rule_and_a_note(tmp_path):
    b, c = _write(tmp_path / "b", heal_result()), _write(tmp_path / "c", heal_result(method="linear+lora"))
    verdict = compare_paths(b.parent, c.parent)
    (comparison,) = verdict.comparisons
    assert comparison.kind == "heal" and comparison.results == [] and verdict.passed
    assert any("--max-heal-gap" in note for note in comparison.notes)
    assert any("heal differs" in note for note in comparison.notes)


@pytest.mark.slow  # three command runs
def test_compare_command_gates_heal_and_exits_1(tmp_path):
    b, c = _write(tmp_path / "b", heal_result()), _write(tmp_path / "c", heal_result(shift=0.2, seed=1))
    failed = invoke("compare", b, c, "--max-heal-gap", "0.25", "--no-plot")
    assert failed.exit_code == 1, failed.output
    assert "heal_gap" in failed.output
    assert invoke("compare", b, c, "--max-heal-gap", "0.5", "--no-plot").exit_code == 0
    bad = invoke("compare", b, c, "--max-heal-gap", "0.5", "--heal-metric", "ppl")
    assert bad.exit_code == 2 and "must be one of nll, kl, top1_agreement" in bad.output
