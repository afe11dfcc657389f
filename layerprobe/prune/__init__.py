"""The pruning experiments: prune-drop (each unit removed in turn), its resume state and shards, the curve.

This room owns the experiments that score a model with parts of it removed: `prune-drop` (`drop.py`
runs it; `state.py` and `samples.py` record every finished evaluation so `--resume` recomputes nothing;
`assemble.py` builds prune_drop.json from those records; `shards.py` writes `--shard i/N` files and
merges them; `agreement.py` compares ΔP with an angular result) and `prune-curve` (`curve.py`). It
scores through `layerprobe.evaluate`, measures through `layerprobe.measure`, and may import the floors
below those (data, model, results, stats, core), never the command line, the gate or the plots.
"""

from layerprobe.prune.curve import PruneCurveSpec, run_prune_curve
from layerprobe.prune.drop import run_prune_drop
from layerprobe.prune.shards import merge_shards

__all__ = [
    "merge_shards",
    "PruneCurveSpec",
    "run_prune_curve",
    "run_prune_drop",
]
