"""One pass over a corpus, measured: the angular-distance matrix and the depth diagnostics."""

from layerprobe.measure.angular import measure, run_angular
from layerprobe.measure.depth import run_depth

__all__ = [
    "measure",
    "run_angular",
    "run_depth",
]
