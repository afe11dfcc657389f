"""`layerprobe heal`: stand in for removed blocks (a folded linear map, LoRA) and measure what comes back.

This room owns healing a cut: `fit.py` (the least-squares map of a span from its normal equations),
`fold.py` (where that map folds exactly into the weights that remain, and the fold), `linear.py` (the
calibration pass and the numerical check of every fold), `held_out.py` (original vs pruned vs healed
on held-out windows) with `recovery.py` (the share of the cost won back, with its interval), and `run.py`
(the command's library call). It sits on the prune floor: it may import evaluate, measure, export,
data, model, results, stats and core, never prune, plots or anything above them.
"""

from layerprobe.heal.fit import NormalEquations
from layerprobe.heal.fold import FoldSite, find_sites, folded, folded_parameters, spans_of
from layerprobe.heal.recovery import Recovery, recovery
from layerprobe.heal.run import run_heal, split_windows

__all__ = [
    "find_sites",
    "folded",
    "folded_parameters",
    "FoldSite",
    "NormalEquations",
    "Recovery",
    "recovery",
    "run_heal",
    "spans_of",
    "split_windows",
]
