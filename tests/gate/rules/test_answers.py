"""compare on per-document answers: exact McNemar per task and variant, Holm over the comparison, non-inferiority.

The runs are prune_drop.json files with samples/<task>.jsonl beside them, written here with answers
chosen per document; every p-value is checked against scipy.stats.binomtest on the discordant counts
counted here, and the Holm adjustment against Holm written out in tests/reference.py.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import numpy as np
import pytest
from factories import metric_drop, prune_drop_result
from reference import holm_adjusted
from scipy import stats

from layerprobe.core.errors import ResultError
from layerprobe.gate import load_rules
from layerprobe.gate.render import render_junit, render_markdown, verdict_to_dict
from layerprobe.gate.verdict import compare_paths
from layerprobe.results import RunDir, write_json

DOCS = 60


def answers(seed: int, accuracy: float) -> list[int]:
    rng = np.random.default_rng(seed)
    return [int(v) for v in rng.random(DOCS) < accuracy]


def write_run(root, name, per_variant: dict[int | None, list[int]], metric: str = "acc"):
    """A run directory: prune_drop.json of task arc_easy over blocks 0..3 and samples/arc_easy.jsonl."""
    layers = [v for v in per_variant if v is not None]
    full = per_variant[None]
    pruned = [sum(per_variant[layer]) / DOCS for layer in layers]
    drop = metric_drop(sum(full) / DOCS, pruned)
    result = prune_drop_result({"arc_easy": {metric: drop}})
    directory = root / name
    write_json(directory / "prune_drop.json", result.to_dict())
    rows = [
        {"variant": variant, "task": "arc_easy", "doc_id": doc, metric: value}
        for variant, values in per_variant.items()
        for doc, value in enumerate(values)
    ]
    sample_file = RunDir(directory).sample_file("arc_easy")
    sample_file.parent.mkdir(parents=True, exist_ok=True)
    sample_file.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return directory


def runs(tmp_path, candidate_shift: float = 0.0):
    base = {None: answers(0, 0.7), **{l: answers(1 + l, 0.7 - 0.1 * l) for l in range(4)}}
    cand = {v: list(a) for v, a in base.items()}
    rng = np.random.default_rng(9)
    for values in cand.values():  # flip some answers either way, more of them wrong with a shift
        for doc in rng.choice(DOCS, size=12, replace=False):
            values[doc] = int(rng.random() < 0.5 - candidate_shift)
    return base, cand, write_run(tmp_path, "base", base), write_run(tmp_path, "cand", cand)


def test_mcnemar_p_values_equal_binomtest_on_the_discordant_counts_and_are_holm_adjusted(tmp_path):
    base, cand, base_dir, cand_dir = runs(tmp_path, candidate_shift=0.3)
    verdict = compare_paths(base_dir, cand_dir)
    tests = verdict.comparisons[0].answers
    assert tests is not None and tests.family == 5 and tests.method == "holm"
    assert [t.variant for t in tests.tests] == [None, 0, 1, 2, 3]
    want = []
    for t in tests.tests:
        b = sum(x == 1 and y == 0 for x, y in zip(base[t.variant], cand[t.variant], strict=True))
        c = sum(x == 0 and y == 1 for x, y in zip(base[t.variant], cand[t.variant], strict=True))
        assert (t.test.losses, t.test.gains, t.test.documents) == (b, c, DOCS)
        p = 1.0 if b + c == 0 else stats.binomtest(b, b + c, 0.5).pvalue
        assert t.test.pvalue == pytest.approx(p, rel=1e-12)
        assert t.baseline_accuracy == sum(base[t.variant]) / DOCS
        assert t.candidate_accuracy == pytest.approx(sum(cand[t.variant]) / DOCS, abs=1e-12)
        want.append(p)
    assert [t.p_adjusted for t in tests.tests] == pytest.approx(holm_adjusted(want), rel=1e-12)
    assert any(t.test.pvalue < 0.05 for t in tests.tests)  # the shift moves some beyond noise

    # The JSON, the markdown and the JUnit XML carry raw and adjusted p-values.
    entry = verdict_to_dict(verdict)["comparisons"][0]["mcnemar"]
    assert entry["family"] == 5 and entry["method"] == "holm"
    assert [t["p_value"] for t in entry["tests"]] == pytest.approx(want, rel=1e-12)
    assert [t["p_adjusted"] for t in entry["tests"]] == pytest.approx(holm_adjusted(want), rel=1e-12)
    markdown = render_markdown(verdict)
    assert "exact McNemar test per task and variant (Holm-adjusted, family of 5 tests)" in markdown
    assert f"| `arc_easy/acc full model` | {DOCS} |" in markdown
    out = ET.fromstring(render_junit(verdict)).find("testsuite/system-out").text
    assert f"p = {want[0]:.3g}, Holm p = {holm_adjusted(want)[0]:.3g}" in out


def test_non_inferiority_passes_only_when_the_upper_bound_of_the_drop_is_within_the_margin(tmp_path):
    base, cand, base_dir, cand_dir = runs(tmp_path)
    verdict = compare_paths(base_dir, cand_dir, load_rules(max_drop_upper=0.5))
    rule = next(r for r in verdict.results if r.rule == "non_inferiority")
    full = verdict.comparisons[0].answers.tests[0]
    assert rule.change == full.test.drop_upper and rule.limit == 0.5 and rule.passed
    assert "non_inferiority[arc_easy/acc]" not in [r.name for r in verdict.failed]
    assert full.test.drop_upper >= full.test.drop  # a bound above the estimate
    strict = compare_paths(base_dir, cand_dir, load_rules(max_drop_upper=full.test.drop_upper - 1e-3))
    failed = {r.name: r for r in strict.failed}
    assert "non-inferiority not shown" in failed["non_inferiority[arc_easy/acc]"].message


def test_non_inferiority_without_samples_is_a_one_line_error_and_plain_runs_have_no_tests(tmp_path):
    _, _, base_dir, cand_dir = runs(tmp_path)
    for directory in (base_dir, cand_dir):
        RunDir(directory).sample_file("arc_easy").unlink()
    assert compare_paths(base_dir, cand_dir).comparisons[0].answers is None
    with pytest.raises(ResultError, match="max_drop_upper needs both runs' per-document answers"):
        compare_paths(base_dir, cand_dir, load_rules(max_drop_upper=0.02))


def write_generation_run(root, name, answers_by_filter: dict[str, list[str]]):
    """A run of a generating task gsm: exact_match and every filter's answers per document, full model only."""
    directory = root / name
    result = prune_drop_result({"gsm": {"exact_match": metric_drop(0.1, [0.1] * 4)}})
    write_json(directory / "prune_drop.json", result.to_dict())
    rows = []
    for doc in range(DOCS):
        row = {"variant": None, "task": "gsm", "doc_id": doc, "exact_match": 0.0}
        row |= {f"answer,{f}": values[doc] for f, values in answers_by_filter.items()}
        rows.append(row)
    sample_file = RunDir(directory).sample_file("gsm")
    sample_file.parent.mkdir(parents=True, exist_ok=True)
    sample_file.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return directory


def test_max_flip_rate_caps_the_share_of_changed_full_model_answers_per_filter(tmp_path):
    strict = [str(d % 7) for d in range(DOCS)]
    flexible = [f"x{d}" for d in range(DOCS)]
    base = write_generation_run(tmp_path, "base", {"strict-match": strict, "flexible-extract": flexible})
    changed = [a if d % 5 else "[invalid]" for d, a in enumerate(strict)]  # 12 of 60 answers change
    cand = write_generation_run(tmp_path, "cand", {"strict-match": changed, "flexible-extract": flexible})
    verdict = compare_paths(base, cand, load_rules(max_flip_rate=0.1))
    rules = {r.name: r for r in verdict.results if r.rule == "flip_rate"}
    assert set(rules) == {"flip_rate[gsm/strict-match]", "flip_rate[gsm/flexible-extract]"}
    strict_rule = rules["flip_rate[gsm/strict-match]"]
    assert strict_rule.candidate == 12 / DOCS and strict_rule.details["flips"] == 12 and not strict_rule.passed
    want = stats.binomtest(12, DOCS).proportion_ci(method="wilson")
    assert strict_rule.details["ci95"] == pytest.approx([want.low, want.high], abs=1e-12)
    assert rules["flip_rate[gsm/flexible-extract]"].passed and rules["flip_rate[gsm/flexible-extract]"].change == 0
    assert compare_paths(base, cand, load_rules(max_flip_rate=0.2)).passed
    with pytest.raises(ResultError, match="max_flip_rate needs both runs' per-document answers"):
        compare_paths(*runs(tmp_path / "acc")[2:], load_rules(max_flip_rate=0.1))
