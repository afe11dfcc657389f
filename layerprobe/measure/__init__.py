"""One pass over a corpus, measured: the angular-distance matrix (`angular`) and the depth diagnostics (`depth`).

This room owns the measurements that read a model's hidden states without changing the model:
`angular.py` runs the pass and `distance.py` accumulates d(x^i, x^j) with its standard errors;
`depth.py` runs `layerprobe depth`, `spread.py` keeps its per-position statistics and `gradients.py`
its gradient pass. It may import data, model, results, stats and core, never evaluate, export, prune or
anything above them. Importing it does not import torch (the command line imports it at start-up):
torch is imported inside the functions that run a model.
"""

from layerprobe.measure.angular import run_angular
from layerprobe.measure.depth import run_depth

__all__ = [
    "run_angular",
    "run_depth",
]
