"""The CI gate: compare a candidate checkpoint's results with a baseline's.

verdict.py pairs inputs and applies rules.py into a Verdict; render.py writes it as table, markdown, JSON
or JUnit; figures.py draws it. The `compare` command itself lives in cli.py.
"""

from layerprobe.gate.rules import GateRules, RuleResult, load_rules
from layerprobe.gate.verdict import KindComparison, Side, Verdict, compare_paths, compare_results

__all__ = [
    "GateRules",
    "KindComparison",
    "RuleResult",
    "Side",
    "Verdict",
    "compare_paths",
    "compare_results",
    "load_rules",
]
