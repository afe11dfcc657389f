"""The heal figure: the original, the pruned and the healed model side by side on held-out text.

One panel per metric (NLL, KL(original ‖ model), top-1 agreement), one bar per model with its 95 %
interval, and the recovery with its interval (or "not defined") in each panel's title.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from layerprobe.plots.common import pyplot, save_figure, title_name
from layerprobe.results import HEAL_METRICS, HEAL_MODELS, HealResult, RunDir

if TYPE_CHECKING:
    from matplotlib.figure import Figure

_LABELS = {"nll": "NLL (nats)", "kl": "KL(original ‖ model)", "top1_agreement": "top-1 agreement"}
_COLOURS = {"original": "#4c72b0", "pruned": "#c44e52", "healed": "#55a868"}


def plot_heal(result: HealResult, directory: Path) -> list[Path]:
    """Draw heal.png and heal.pdf into `directory`; returns the paths."""
    run = RunDir(directory)
    return save_figure(heal_figure(result), run.plot("heal"), run.plot("heal", suffix="pdf"))


def heal_figure(result: HealResult) -> Figure:
    """The figure itself (the report embeds it as SVG): a panel per metric, a bar per model."""
    plt = pyplot()
    fig, axes = plt.subplots(1, len(HEAL_METRICS), figsize=(4 * len(HEAL_METRICS), 3.6))
    for ax, metric in zip(axes, HEAL_METRICS, strict=True):
        entry = result.metrics[metric]
        values = [entry[m]["value"] for m in HEAL_MODELS]
        errors = [[0.0, 0.0] for _ in HEAL_MODELS]
        for i, m in enumerate(HEAL_MODELS):
            ci = entry[m]["ci95"]
            if ci is not None:
                errors[i] = [values[i] - ci[0], ci[1] - values[i]]
        ax.bar(
            list(HEAL_MODELS),
            values,
            yerr=list(zip(*errors, strict=True)),
            color=[_COLOURS[m] for m in HEAL_MODELS],
            capsize=4,
        )
        rec = entry["recovery"]
        if rec["value"] is None:
            note = "recovery not defined"
        else:
            low, high = rec["ci95"]
            note = f"recovery {rec['value']:.0%} [{low:.0%}, {high:.0%}]"
        ax.set_title(f"{_LABELS[metric]}\n{note}", fontsize=9)
    blocks = ", ".join(map(str, result.removed))
    fig.suptitle(f"{title_name(result.model)}: blocks {blocks} removed, healed by {result.method} (95 % intervals)")
    fig.tight_layout()
    return fig
