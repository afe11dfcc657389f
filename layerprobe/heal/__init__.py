"""`layerprobe heal` and `layerprobe gain`: stand in for removed blocks, measure what comes back and what it buys.

This room owns healing a cut: `fit.py` (the least-squares map of a span from its normal equations),
`fold.py` (where that map folds exactly into the weights that remain, and the fold), `linear.py` (the
calibration pass and the numerical check of every fold), `lora.py` (LoRA adapters through peft),
`parallel.py` (LoRA on the ranks of an `accelerate launch`), `held_out.py` (original vs pruned vs healed
on held-out windows) with `recovery.py` (the share of the cost won back, with its interval), `run.py`
(the command's library call), and `gain.py` (parameters, bytes, memory and speed of a smaller checkpoint
against the original). It sits on the prune floor: it may import evaluate, measure, export, data, model,
results, stats and core, never prune, plots or anything above them.
"""

from layerprobe.heal.fit import NormalEquations
from layerprobe.heal.fold import FoldSite, find_sites, folded, folded_parameters, spans_of
from layerprobe.heal.gain import run_gain
from layerprobe.heal.recovery import Recovery, recovery
from layerprobe.heal.run import run_heal, split_windows

__all__ = [
    "run_gain",
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
