"""The CI gate: compare a candidate checkpoint's results with a baseline's.

verdict.py pairs inputs and applies rules.py into a Verdict; render.py writes it as table, markdown, JSON
or JUnit; figures.py draws it. The `compare` command itself lives in cli.py.
"""

from layerprobe.gate.figures import plot_verdict
from layerprobe.gate.render import FORMATS, build_table, check_format, render, render_junit
from layerprobe.gate.rules import GateRules, RuleResult, load_rules
from layerprobe.gate.verdict import KindComparison, Side, Verdict, compare_paths, compare_results

__all__ = [
    "build_table",
    "check_format",
    "compare_paths",
    "compare_results",
    "FORMATS",
    "GateRules",
    "KindComparison",
    "load_rules",
    "plot_verdict",
    "render",
    "render_junit",
    "RuleResult",
    "Side",
    "Verdict",
]
