"""Pure statistics (numpy/scipy only): paired differences, bootstraps, rank correlations."""

from layerprobe.stats.paired import (
    DEFAULT_DRAWS,
    DEFAULT_SEED,
    PairedDelta,
    paired_bootstrap,
    paired_mean_stats,
    spearman_bootstrap,
    stratified_mean_stats,
    top_k_overlap,
)

__all__ = [
    "DEFAULT_DRAWS",
    "DEFAULT_SEED",
    "paired_bootstrap",
    "paired_mean_stats",
    "PairedDelta",
    "spearman_bootstrap",
    "stratified_mean_stats",
    "top_k_overlap",
]
