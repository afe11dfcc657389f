"""The gain figure: each candidate's ratio to the original (parameters, bytes, peak memory, prefill, decode)."""

from __future__ import annotations

from pathlib import Path

from layerprobe.plots.common import pyplot, save_figure, short_name
from layerprobe.results import GainResult, RunDir

_KEYS = (
    ("parameters", "parameters"),
    ("bytes_on_disk", "bytes on disk"),
    ("peak_memory_bytes", "peak memory"),
    ("prefill_tokens_per_second", "prefill tok/s"),
    ("decode_tokens_per_second", "decode tok/s"),
)


def plot_gain(result: GainResult, directory: Path) -> list[Path]:
    """Draw gain.png and gain.pdf: grouped bars of candidate ÷ original, speeds with their 25–75 % spread."""
    plt = pyplot()
    candidates = result.models[1:]
    fig, ax = plt.subplots(figsize=(2 + 1.6 * len(_KEYS), 3.8))
    width = 0.8 / len(candidates)
    for i, entry in enumerate(candidates):
        xs, ys, low, high = [], [], [], []
        for k, (key, _label) in enumerate(_KEYS):
            ratio = entry["ratios"][key]
            if ratio is None:
                continue
            value = ratio["median"] if isinstance(ratio, dict) else ratio
            spread = ratio["spread"] if isinstance(ratio, dict) else [value, value]
            xs.append(k + i * width)
            ys.append(value)
            low.append(value - spread[0])
            high.append(spread[1] - value)
        ax.bar(xs, ys, width, yerr=[low, high], capsize=3, label=short_name(entry["model"]))
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set_xticks([k + 0.4 - width / 2 for k in range(len(_KEYS))], [label for _, label in _KEYS])
    ax.set_ylabel(f"÷ {short_name(result.models[0]['model'])}")
    ax.set_title("What the cut buys (speeds: median and 25–75 % of per-round ratios)", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    run = RunDir(directory)
    return save_figure(fig, run.plot("gain"), run.plot("gain", suffix="pdf"))
