"""The rules `layerprobe compare` gates on, one module per idea.

thresholds.py holds `GateRules` (every threshold with where it came from) and reads the rules file;
record.py the `RuleResult` every check returns; angular.py, prune_drop.py and depth.py the checks of
each result kind. `gate.verdict` picks the kind's checks; other rooms use the names on `layerprobe.gate`.
"""
