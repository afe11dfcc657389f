"""Pure statistics (numpy/scipy only): paired differences, sequential intervals, multiplicity, McNemar, rankings.

scipy is imported by the functions that use it, so importing this room (as the command line does) stays light.
"""

from layerprobe.stats.mcnemar import McNemar, discordant_counts, mcnemar
from layerprobe.stats.multiplicity import Adjusted, adjust_pvalues, bootstrap_pvalue, normal_pvalue
from layerprobe.stats.paired import (
    DEFAULT_DRAWS,
    DEFAULT_SEED,
    INFORMATIVE_DISTINCT,
    Z95,
    PairedDelta,
    distinct_values,
    paired_bootstrap,
    paired_mean_stats,
    spearman_interval,
    stratified_mean_stats,
    top_k_overlap,
)
from layerprobe.stats.proportion import PROPORTION_METRICS, score_interval95, wilson_interval
from layerprobe.stats.ranking import (
    BlockScores,
    RankingStability,
    expected_lowest_k_jaccard,
    kendall_tau_b,
    lowest_k_jaccard,
    lowest_k_jaccard_chance,
    ranking_stability,
    spearman_rho,
)
from layerprobe.stats.sequential import ConfidenceSequence, StopReason, scoring_order, stop_reason

__all__ = [
    "Z95",
    "adjust_pvalues",
    "Adjusted",
    "BlockScores",
    "bootstrap_pvalue",
    "ConfidenceSequence",
    "DEFAULT_DRAWS",
    "DEFAULT_SEED",
    "discordant_counts",
    "kendall_tau_b",
    "expected_lowest_k_jaccard",
    "lowest_k_jaccard",
    "lowest_k_jaccard_chance",
    "mcnemar",
    "McNemar",
    "normal_pvalue",
    "paired_bootstrap",
    "paired_mean_stats",
    "PairedDelta",
    "ranking_stability",
    "RankingStability",
    "scoring_order",
    "INFORMATIVE_DISTINCT",
    "distinct_values",
    "spearman_interval",
    "spearman_rho",
    "stop_reason",
    "StopReason",
    "stratified_mean_stats",
    "top_k_overlap",
    "Z95",
    "PROPORTION_METRICS",
    "score_interval95",
    "wilson_interval",
]
