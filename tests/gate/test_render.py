"""`compare`'s renderers: JSON that parses back, markdown for CI summaries, JUnit, the terminal table."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path

import pytest
from factories import (
    GATE_ADJACENT,
    angular_from_adjacent,
    arc_acc_result,
    depth_dict,
    gate_baseline_prune,
    metric_drop,
    prune_drop_result,
    verdict_of,
    write_result,
    write_run_dirs,
)

from layerprobe.core.errors import LayerprobeError
from layerprobe.gate import GateRules
from layerprobe.gate.render import (
    render,
    render_json,
    render_junit,
    render_markdown,
    render_table,
    verdict_to_dict,
)
from layerprobe.gate.verdict import Verdict, compare_paths, compare_results
from layerprobe.results import DepthResult


def test_json_output_parses_back_with_every_rule_and_threshold(mixed_verdict):
    data = json.loads(render_json(mixed_verdict))
    assert data["schema"] == "layerprobe/compare@1"
    assert data["verdict"] == "regression" and data["passed"] is False
    assert data["counts"] == {"rules": 4, "failed": 1, "skipped": 0}
    assert data["rules"]["prune_drop"]["se_factor"] == {"value": 2.0, "source": "default"}
    assert data["inputs"]["candidate"].endswith("cand")
    verdicts = {(c["kind"], r["name"]): r["passed"] for c in data["comparisons"] for r in c["results"]}
    assert verdicts == {
        ("angular", "lazy_blocks"): True,
        ("angular", "mean_adjacent"): True,
        ("prune_drop", "baseline_score[arc_easy/acc]"): True,
        ("prune_drop", "layer_delta[arc_easy/acc]"): False,
    }
    layer_rule = data["comparisons"][1]["results"][1]
    assert layer_rule["details"]["failed_layers"] == [2] and layer_rule["thresholds"]["se_factor"] == 2.0
    assert data["comparisons"][1]["candidate"]["model"] == "org/cand"


def test_json_output_has_no_nan_literals():
    nan = float("nan")
    comp_verdict = compare_results(
        angular_from_adjacent(GATE_ADJACENT), angular_from_adjacent([nan, nan, 0.4, 0.1]), GateRules()
    )
    text = render_json(Verdict(Path("b"), Path("c"), GateRules(), [comp_verdict], []))
    assert "NaN" not in text and json.loads(text)["comparisons"][0]["results"][0]["details"]


def test_markdown_output_has_a_headline_and_one_row_per_rule(mixed_verdict):
    text = render_markdown(mixed_verdict)
    assert text.startswith("### ❌ layerprobe compare: regression (1 of 4 rules failed)")
    rows = [line for line in text.splitlines() if line.startswith("| ") and "`" in line]
    status = {row.split("|")[3].strip().strip("`"): row.split("|")[1].strip() for row in rows}
    assert status == {
        "lazy_blocks": "✅",
        "mean_adjacent": "✅",
        "baseline_score[arc_easy/acc]": "✅",
        "layer_delta[arc_easy/acc]": "❌",
    }
    assert all(len(re.split(r"(?<!\\)\|", row)) == 11 for row in rows)  # 9 cells between 10 pipes
    assert "- ❌ **prune_drop · layer_delta[arc_easy/acc]**: removing layer(s) [2]" in text


def test_markdown_escapes_pipes_in_task_names():
    comp = compare_results(
        prune_drop_result({"a|b": {"acc": metric_drop(0.7, [0.7] * 4)}}),
        prune_drop_result({"a|b": {"acc": metric_drop(0.6, [0.6] * 4)}}),
        GateRules(),
    )
    text = render_markdown(Verdict(Path("b"), Path("c"), GateRules(), [comp], []))
    rows = [line for line in text.splitlines() if line.startswith("| ") and "`" in line]
    assert len(rows) == 2 and all(len(re.split(r"(?<!\\)\|", row)) == 11 for row in rows)
    assert "a\\|b/acc" in rows[0]


def test_markdown_headline_on_pass(tmp_path):
    verdict = compare_paths(
        write_result(tmp_path, "b.json", angular_from_adjacent(GATE_ADJACENT)),
        write_result(tmp_path, "c.json", angular_from_adjacent(GATE_ADJACENT)),
    )
    assert render_markdown(verdict).startswith("### ✅ layerprobe compare: pass (2 rules)")


def test_junit_output_has_one_testcase_per_rule_and_failures_on_regressions(mixed_verdict, tmp_path):
    root = ET.fromstring(render_junit(mixed_verdict))
    assert root.tag == "testsuites" and root.get("tests") == "4" and root.get("failures") == "1"
    cases = {(c.get("classname"), c.get("name")): c for c in root.iter("testcase")}
    assert set(cases) == {
        ("layerprobe.compare.angular", "lazy_blocks"),
        ("layerprobe.compare.angular", "mean_adjacent"),
        ("layerprobe.compare.prune_drop", "baseline_score[arc_easy/acc]"),
        ("layerprobe.compare.prune_drop", "layer_delta[arc_easy/acc]"),
    }
    failed = [name for (_, name), case in cases.items() if case.find("failure") is not None]
    assert failed == ["layer_delta[arc_easy/acc]"]
    failure = cases[("layerprobe.compare.prune_drop", "layer_delta[arc_easy/acc]")].find("failure")
    assert "layer(s) [2]" in failure.get("message") and failure.get("type") == "regression"
    suites = {s.get("name"): s for s in root.iter("testsuite")}
    assert suites["layerprobe.compare.prune_drop"].get("failures") == "1"
    props = {p.get("name"): p.get("value") for p in suites["layerprobe.compare.angular"].iter("property")}
    assert props["lazy_threshold"] == "0.2" and props["baseline_layers"] == "4"


def test_junit_marks_skipped_kinds(tmp_path):
    base, cand = write_run_dirs(
        tmp_path,
        {"angular.json": angular_from_adjacent(GATE_ADJACENT)},
        {"angular.json": angular_from_adjacent(GATE_ADJACENT), "prune_drop.json": gate_baseline_prune()},
    )
    root = ET.fromstring(render_junit(compare_paths(base, cand)))
    skipped = [c for c in root.iter("testcase") if c.find("skipped") is not None]
    assert [c.get("name") for c in skipped] == ["prune_drop"] and root.get("skipped") == "1"


def test_table_output_names_every_rule_and_the_verdict(mixed_verdict):
    text = render_table(mixed_verdict)
    for name in ("lazy_blocks", "mean_adjacent", "baseline_score[arc_easy/acc]", "layer_delta[arc_easy/acc]"):
        assert name in text
    assert text.count("FAIL") == 2 and "regression: 1 of 4 rules failed" in text  # row + failure line
    assert render(mixed_verdict, "table") == text


def test_unknown_format_is_a_user_error(mixed_verdict):
    with pytest.raises(LayerprobeError, match="Unknown --format 'html'"):
        render(mixed_verdict, "html")


def test_change_column_is_candidate_minus_baseline_with_the_worse_direction():
    fell = compare_results(angular_from_adjacent([0.5, 0.4, 0.3]), angular_from_adjacent([0.5, 0.1, 0.1]), GateRules())
    lazy, mean = fell.results
    assert (lazy.difference, lazy.worse_if) == (2, "higher")
    assert mean.worse_if == "lower" and mean.difference < 0 and mean.change > 0  # `change` is "how much worse"
    score = compare_results(arc_acc_result(0.70), arc_acc_result(0.65), GateRules()).results[0]
    assert score.worse_if == "lower" and round(score.difference, 9) == -0.05
    table = render_table(verdict_of(fell))
    header = next(line for line in table.splitlines() if "criterion" in line)
    assert "change (cand − base)" in header and "worse if" in header and "allowed change" in header
    row = next(line for line in table.splitlines() if "mean_adjacent" in line)
    assert "-0.1667" in row and "lower" in row and "≥ -0.0200" in row
    lazy_row = next(line for line in table.splitlines() if "lazy_blocks" in line)
    assert "+2" in lazy_row and "higher" in lazy_row and "≤ +0" in lazy_row
    markdown = render_markdown(verdict_of(fell))
    assert "| change (cand − base) | worse if | allowed change |" in markdown
    entry = verdict_to_dict(verdict_of(fell))["comparisons"][0]["results"][1]
    assert entry["worse_if"] == "lower" and entry["difference"] == entry["change"] == mean.difference
    assert entry["worsening"] == mean.change


def _signed(value: float) -> str:
    return f"{int(value):+d}" if float(value).is_integer() and abs(value) >= 1 else f"{value:+.4f}"


def test_every_output_shows_the_change_as_candidate_minus_baseline():
    """Rules whose worse direction is lower, higher, and a ratio rule: the sign is the same in all four outputs."""
    fell = compare_results(angular_from_adjacent([0.5, 0.4, 0.3]), angular_from_adjacent([0.5, 0.1, 0.1]), GateRules())
    score = compare_results(arc_acc_result(0.70), arc_acc_result(0.65), GateRules())
    base = DepthResult.from_dict(depth_dict())
    grown = replace(base, rms=replace(base.rms, mean=[1.0, 1.0, 1.5]), summary=None)
    depth = compare_results(base, grown, GateRules())
    verdict = verdict_of(fell, score, depth)
    expected = {}
    for r in verdict.results:
        if r.baseline is not None and r.candidate is not None:
            expected[r.name] = r.candidate - r.baseline  # independent of RuleResult.difference
    assert {"mean_adjacent", "lazy_blocks", "baseline_score[arc/acc]", "rms_growth"} <= set(expected)
    assert expected["mean_adjacent"] < 0 < expected["lazy_blocks"] and expected["rms_growth"] > 0
    assert expected["baseline_score[arc/acc]"] < 0
    entries = {e["name"]: e for c in verdict_to_dict(verdict)["comparisons"] for e in c["results"]}
    table = render_table(verdict, width=220).splitlines()
    markdown = render_markdown(verdict).splitlines()
    header = next(line for line in markdown if "change (cand − base)" in line).split(" | ")
    column = header.index("change (cand − base)")
    junit = {c.get("name"): c for c in ET.fromstring(render_junit(verdict)).iter("testcase")}
    for name, change in expected.items():
        shown = _signed(change)
        assert entries[name]["change"] == pytest.approx(change), name  # JSON
        assert (entries[name]["change"] > 0) == (change > 0)
        row = next(line for line in table if f"· {name}" in line)  # terminal
        assert shown in row, (name, shown, row)
        md_row = next(line for line in markdown if f"`{name}`" in line).split(" | ")  # markdown
        assert md_row[column].startswith(shown), (name, md_row[column])
        case = junit[name]  # JUnit
        body = "".join(node.text or "" for node in case)
        assert f"change (candidate − baseline) {shown}" in body, (name, body)
    assert entries["rms_growth"]["ratio"] == pytest.approx(1.5) and entries["rms_growth"]["worsening"] == 1.5
    assert "+0.5000 (×1.5000)" in next(line for line in table if "· rms_growth" in line)
