"""The pruning experiments: prune-drop (each unit removed in turn), its resume state and shards, the curve."""

from layerprobe.prune.curve import PruneCurveSpec, run_prune_curve
from layerprobe.prune.drop import merge_shards, run_prune_drop

__all__ = [
    "merge_shards",
    "PruneCurveSpec",
    "run_prune_curve",
    "run_prune_drop",
]
