"""The ΔP plot with paired uncertainty: intervals as error bars, colour only when significant, d overlay."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pytest
from matplotlib.colors import to_rgba
from matplotlib.container import BarContainer, ErrorbarContainer

from layerprobe.plots.common import HARMFUL, HELPFUL, WITHIN_NOISE
from layerprobe.plots.delta import prune_drop_figure
from layerprobe.prune.agreement import metric_agreement
from layerprobe.results import MetricDrop, ModelInfo, PruneDropResult, RunInfo, TaskDrop

RUN = RunInfo(started_at="2025-01-01T00:00:00+00:00", seconds=1.0, versions={}, device="cpu")
INFO = ModelInfo("org/m", None, None, "LlamaForCausalLM", "llama", "causal-lm", "float32", 4, "l", "B")


def paired_result(higher_is_better=True, agreement=False):
    deltas = [-0.30, -0.02, 0.04, 0.10]
    intervals = [[-0.40, -0.20], [-0.06, 0.02], [-0.01, 0.09], [0.05, 0.15]]
    metric = MetricDrop(
        baseline=0.5,
        baseline_stderr=0.05,
        higher_is_better=higher_is_better,
        layers=[0, 1, 2, 3],
        pruned=[0.5 + d for d in deltas],
        stderr=[0.05] * 4,
        delta_stderr=[0.05, 0.02, 0.025, 0.025],
        delta_ci95=intervals,
        significant=[True, False, False, True],
        delta_method="paired_mean",
    )
    block = {"acc": metric_agreement([0.4, 0.1, 0.2, 0.3], metric, draws=50)} if agreement else None
    task = TaskDrop(metrics={"acc": metric}, num_fewshot=0, limit=None, samples=100, agreement=block)
    return PruneDropResult(model=INFO, engine="simple", settings={}, tasks={"arc": task}, run=RUN), metric


@pytest.mark.parametrize("higher_is_better", [True, False])
def test_bars_are_coloured_only_when_the_paired_interval_excludes_zero(higher_is_better):
    result, metric = paired_result(higher_is_better)
    fig = prune_drop_figure(result, "arc")
    try:
        ax = fig.axes[0]
        bars = next(c for c in ax.containers if isinstance(c, BarContainer) and len(c) > 1)
        worse, better = (HARMFUL, HELPFUL) if higher_is_better else (HELPFUL, HARMFUL)
        expected = [worse, WITHIN_NOISE, WITHIN_NOISE, better]
        assert [bar.get_facecolor() for bar in bars] == [pytest.approx(to_rgba(c)) for c in expected]
        # Error bars span exactly the paired intervals (asymmetric), not ± the pruned scores' stderr.
        errorbar = next(c for c in ax.containers if isinstance(c, ErrorbarContainer) and c.lines[2])
        spans = sorted((float(s[0][1]), float(s[1][1])) for s in errorbar.lines[2][0].get_segments())
        assert spans == [pytest.approx(tuple(i)) for i in sorted(map(tuple, metric.delta_ci95))]
        labels = [t.get_text() for t in ax.get_legend().get_texts()]
        assert "not significant (95 % CI spans 0)" in labels and "paired 95 % CI of ΔP" in labels
        assert not [p for p in ax.patches if p.get_label() == "± baseline stderr"]
        assert len(fig.axes) == 1  # no angular result, no second axis
    finally:
        plt.close(fig)


def test_adjacent_distance_is_overlaid_on_a_second_axis():
    result, _ = paired_result(agreement=True)
    fig = prune_drop_figure(result, "arc")
    try:
        assert len(fig.axes) == 2
        line = fig.axes[1].get_lines()[0]
        assert list(line.get_xdata()) == [0, 1, 2, 3] and list(line.get_ydata()) == [0.4, 0.1, 0.2, 0.3]
        assert any("Spearman" in t.get_text() for t in fig.axes[1].texts)
    finally:
        plt.close(fig)
