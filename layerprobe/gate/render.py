"""Renderers for `layerprobe compare`: pure functions of a `Verdict`, each returning a plain string.

A terminal table (rich), GitHub markdown for $GITHUB_STEP_SUMMARY, strict JSON (schema
layerprobe/compare@1) and JUnit XML; tests parse them back. Building the verdict lives in `gate/verdict.py`.
"""

from __future__ import annotations

import io
import json
import math
import xml.etree.ElementTree as ET
from typing import Any

from rich import box
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from layerprobe.core import LayerprobeError, markdown_text
from layerprobe.gate.rules.record import RuleResult
from layerprobe.gate.verdict import KindComparison, Verdict
from layerprobe.results import COMPARE_SCHEMA

# The numeric columns of the table and the markdown: the change is candidate − baseline, and "worse if"
# says which sign of it counts against the candidate (higher lazy count, lower accuracy, ...).
COLUMNS = ("baseline", "candidate", "change (cand − base)", "worse if", "allowed change")
FORMATS = ("table", "markdown", "json")


def render(verdict: Verdict, fmt: str) -> str:
    """The verdict in one of FORMATS, as text."""
    check_format(fmt)
    return {"table": render_table, "markdown": render_markdown, "json": render_json}[fmt](verdict)


def check_format(fmt: str) -> None:
    """Refuse an unknown --format before any work is done (exit 2)."""
    if fmt not in FORMATS:
        raise LayerprobeError(f"Unknown --format {fmt!r}.", hint=f"Use one of: {', '.join(FORMATS)}.")


def verdict_to_dict(verdict: Verdict) -> dict[str, Any]:
    """The machine-readable verdict (schema layerprobe/compare@1); non-finite numbers become null."""
    document = {
        "schema": COMPARE_SCHEMA,
        "verdict": "pass" if verdict.passed else "regression",
        "passed": verdict.passed,
        "inputs": {"baseline": str(verdict.baseline), "candidate": str(verdict.candidate)},
        "rules": verdict.rules.to_dict(),
        "counts": {"rules": len(verdict.results), "failed": len(verdict.failed), "skipped": len(verdict.skipped)},
        "comparisons": [
            {
                "kind": c.kind,
                "passed": c.passed,
                "baseline": c.baseline.to_dict(),
                "candidate": c.candidate.to_dict(),
                "layer_difference": c.candidate.num_layers - c.baseline.num_layers,
                "results": [
                    {
                        "name": r.name,
                        "rule": r.rule,
                        "subject": r.subject,
                        "criterion": r.criterion,
                        "thresholds": r.thresholds,
                        "baseline": r.baseline,
                        "candidate": r.candidate,
                        "change": r.difference,  # candidate − baseline, as every output shows it
                        "difference": r.difference,  # the same number, under its name in older files
                        "worse_if": r.worse_if,
                        "worsening": r.change,  # how much worse (positive = worse): passed ⇔ worsening ≤ limit
                        "limit": r.limit,
                        "ratio": r.change if r.scale == "ratio" else None,
                        "scale": r.scale,
                        "passed": r.passed,
                        "message": r.message,
                        "details": r.details,
                    }
                    for r in c.results
                ],
                "notes": c.notes,
                "mcnemar": None if c.answers is None else c.answers.to_dict(),
            }
            for c in verdict.comparisons
        ],
        "skipped": verdict.skipped,
    }
    return {key: _finite(value) for key, value in document.items()}


def render_json(verdict: Verdict) -> str:
    """`verdict_to_dict` as strict JSON (no NaN literals), so jq and other tools can read it."""
    return json.dumps(verdict_to_dict(verdict), indent=2, ensure_ascii=False, allow_nan=False)


def build_table(verdict: Verdict) -> Group:
    """The rich renderable the terminal shows: one row per rule, then failures and notes."""
    table = Table(title="layerprobe compare", title_justify="left", box=box.SIMPLE_HEAD)
    table.add_column("")
    table.add_column("rule · criterion", overflow="fold", ratio=1)
    for name in COLUMNS:
        table.add_column(name, justify="right", no_wrap=True)
    for comp in verdict.comparisons:
        for r in comp.results:  # Text, not markup: a rule name like layer_delta[mmlu/acc] looks like a tag
            rule = Text.assemble((f"{comp.kind} · {r.name}", "bold"), "\n", (r.criterion, "dim"))
            table.add_row(Text("PASS", "green") if r.passed else Text("FAIL", "bold red"), rule, *_cells(r))
    sides = [
        Text(
            f"{c.kind}: baseline {c.baseline.path} ({c.baseline.model}, L = {c.baseline.num_layers}) → "
            f"candidate {c.candidate.path} ({c.candidate.model}, L = {c.candidate.num_layers})"
        )
        for c in verdict.comparisons
    ]
    lines = [
        Text.from_markup(f"[bold red]regression:[/] {len(verdict.failed)} of {len(verdict.results)} rules failed")
        if not verdict.passed
        else Text.from_markup(f"[bold green]pass:[/] all {len(verdict.results)} rules passed")
    ]
    lines += [Text(f"FAIL {r.kind} {r.name}: {r.message}", style="red") for r in verdict.failed]
    lines += [Text(line) for c in verdict.comparisons for line in _answer_lines(c)]
    lines += [Text(f"note: {n}", style="dim") for n in _notes(verdict)]
    return Group(*sides, table, *lines)


def render_table(verdict: Verdict, width: int = 160) -> str:
    """The terminal table as plain text (no colour), e.g. for logs and tests."""
    buffer = io.StringIO()
    Console(file=buffer, width=width, color_system=None, force_terminal=False).print(build_table(verdict))
    return buffer.getvalue()


def render_markdown(verdict: Verdict) -> str:
    """GitHub-flavoured markdown for $GITHUB_STEP_SUMMARY: a ✅/❌ headline, one table row per rule."""
    if verdict.passed:
        head = f"### ✅ layerprobe compare: pass ({len(verdict.results)} rules)"
    else:
        head = f"### ❌ layerprobe compare: regression ({len(verdict.failed)} of {len(verdict.results)} rules failed)"
    out = [head, ""]
    for c in verdict.comparisons:
        out.append(
            f"- **{c.kind}**: baseline `{c.baseline.model}` (L = {c.baseline.num_layers}) vs candidate "
            f"`{c.candidate.model}` (L = {c.candidate.num_layers})"
        )
    out += [
        "",
        "| | kind | rule | criterion | " + " | ".join(COLUMNS) + " |",
        "|---|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for c in verdict.comparisons:
        for r in c.results:
            cells = ["✅" if r.passed else "❌", c.kind, f"`{r.name}`", r.criterion, *_cells(r)]
            out.append("| " + " | ".join(_md(cell) for cell in cells) + " |")
    out.append("")
    out += [f"- ❌ **{r.kind} · {_md(r.name)}**: {_md(r.message)}" for r in verdict.failed]
    for c in verdict.comparisons:
        if c.answers is not None and c.answers.tests:
            out += [
                "",
                _answers_heading(c),
                "",
                "| test | documents | lost | gained | Δ accuracy | p | p (Holm) | drop ≤ (95 %) |",
            ]
            out.append("|---|---:|---:|---:|---:|---:|---:|---:|")
            out += [
                f"| `{_md(t.label)}` | {t.test.documents} | {t.test.losses} | {t.test.gains} | {t.test.delta:+.4f} "
                f"| {_p(t.test.pvalue)} | {_p(t.p_adjusted)} | {t.test.drop_upper:.4f} |"
                for t in c.answers.tests
            ]
    notes = _notes(verdict)
    if notes:
        out += ["", "<details><summary>notes</summary>", "", *[f"- {_md(n)}" for n in notes], "", "</details>"]
    return "\n".join(out) + "\n"


def render_junit(verdict: Verdict) -> str:
    """JUnit XML: a testsuite per kind, a testcase per rule, <failure> on regression, <skipped> kinds."""
    root = ET.Element(
        "testsuites",
        name="layerprobe compare",
        tests=str(len(verdict.results) + len(verdict.skipped)),
        failures=str(len(verdict.failed)),
        errors="0",
        skipped=str(len(verdict.skipped)),
        time="0",
    )
    for c in verdict.comparisons:
        suite = ET.SubElement(
            root,
            "testsuite",
            name=f"layerprobe.compare.{c.kind}",
            tests=str(len(c.results)),
            failures=str(sum(not r.passed for r in c.results)),
            errors="0",
            skipped="0",
            time="0",
        )
        props = ET.SubElement(suite, "properties")
        for key, value in (
            ("baseline", c.baseline.path),
            ("candidate", c.candidate.path),
            ("baseline_layers", c.baseline.num_layers),
            ("candidate_layers", c.candidate.num_layers),
            *((name, spec["value"]) for name, spec in verdict.rules.to_dict()[c.kind].items()),
        ):
            if value not in (None, {}):
                ET.SubElement(props, "property", name=key, value=str(value))
        for r in c.results:
            case = ET.SubElement(suite, "testcase", classname=f"layerprobe.compare.{c.kind}", name=r.name, time="0")
            baseline, candidate, change, worse_if, allowed = _cells(r)
            body = (
                f"{r.criterion}\nbaseline {baseline}, candidate {candidate}, change (candidate − baseline) {change}, "
                f"worse if {worse_if}, allowed {allowed}"
            )
            if r.passed:
                ET.SubElement(case, "system-out").text = f"{r.message}\n{body}"
            else:
                ET.SubElement(case, "failure", message=r.message, type="regression").text = body
        if c.notes or _answer_lines(c):
            ET.SubElement(suite, "system-out").text = "\n".join([*_answer_lines(c), *c.notes])
    if verdict.skipped:
        suite = ET.SubElement(
            root,
            "testsuite",
            name="layerprobe.compare.skipped",
            tests=str(len(verdict.skipped)),
            failures="0",
            errors="0",
            skipped=str(len(verdict.skipped)),
            time="0",
        )
        for message in verdict.skipped:
            case = ET.SubElement(
                suite, "testcase", classname="layerprobe.compare.skipped", name=message.split(":")[0], time="0"
            )
            ET.SubElement(case, "skipped", message=message)
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


# --- helpers -------------------------------------------------------------------------------------------


def _answers_heading(c: KindComparison) -> str:
    """What the McNemar lines are: the test, the adjustment and its family."""
    assert c.answers is not None
    return (
        f"{c.kind}: paired answers, exact McNemar test per task and variant "
        f"(Holm-adjusted, family of {c.answers.family} tests)"
    )


def _answer_lines(c: KindComparison) -> list[str]:
    """One line per McNemar test under its heading (nothing without per-document answers)."""
    if c.answers is None or not c.answers.tests:
        return []
    return [_answers_heading(c)] + [
        f"  {t.label}: {t.test.documents} documents, {t.test.losses} lost, {t.test.gains} gained, "
        f"Δ accuracy {t.test.delta:+.4f}, p = {_p(t.test.pvalue)}, Holm p = {_p(t.p_adjusted)}, "
        f"drop ≤ {t.test.drop_upper:.4f} ({t.test.level:.0%} one-sided)"
        for t in c.answers.tests
    ]


def _p(value: float) -> str:
    """A p-value with 3 significant digits (tiny ones in scientific notation)."""
    return f"{value:.3g}"


def _notes(verdict: Verdict) -> list[str]:
    return [f"{c.kind}: {n}" for c in verdict.comparisons for n in c.notes] + verdict.skipped


def _cells(r: RuleResult) -> list[str]:
    """baseline, candidate, candidate − baseline, the direction that is worse, and the allowed change."""
    count = r.rule == "lazy_blocks"
    bound = "≤" if r.worse_if == "higher" else "≥"
    if r.scale == "ratio":  # bounded as a factor: the difference, then ×ratio, against ≤ ×limit
        ratio = "" if r.change is None else f" (×{_num(r.change)})"
        change = _num(r.difference, signed=True) + ratio
        return [_num(r.baseline), _num(r.candidate), change, r.worse_if, f"{bound} ×{_num(r.limit)}"]
    return [
        _num(r.baseline, count),
        _num(r.candidate, count),
        _num(r.difference, count, signed=True),
        r.worse_if,
        f"{bound} {_num(r.allowed_difference, count, signed=True)}",
    ]


def _num(value: float | None, count: bool = False, signed: bool = False) -> str:
    if value is None:
        return "—"
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if count and isinstance(value, float) and value.is_integer():
        value = int(value)
    return f"{value:{'+' if signed else ''}{'d' if count and isinstance(value, int) else '.4f'}}"


def _md(text: str) -> str:
    """A name or message safe in one markdown cell: no line break, pipe or raw HTML (core/text.py)."""
    return markdown_text(str(text))


def _finite(value: object) -> object:
    """The value with every non-finite float, however deeply nested, as None (JSON has no NaN)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value
