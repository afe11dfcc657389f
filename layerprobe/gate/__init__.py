"""The CI gate: compare a candidate checkpoint's results with a baseline's.

verdict.py pairs inputs and applies the rules of their kind (the rules/ package: thresholds, the
RuleResult record, one module per result kind) into a Verdict; render.py writes it as table, markdown,
JSON or JUnit; figures.py draws it. The `compare` command itself lives in the cli.
"""

from layerprobe.gate.figures import compare_angular_figure, compare_prune_drop_figure, plot_verdict
from layerprobe.gate.render import FORMATS, build_table, check_format, render, render_junit, verdict_to_dict
from layerprobe.gate.rules.record import RuleResult
from layerprobe.gate.rules.thresholds import GateRules, load_rules
from layerprobe.gate.verdict import KindComparison, Side, Verdict, compare_paths, compare_results

__all__ = [
    "build_table",
    "check_format",
    "compare_angular_figure",
    "compare_prune_drop_figure",
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
    "verdict_to_dict",
]
