"""stability.md: a StabilityResult as markdown, and the short descriptions the terminal table shares.

Every number comes from the result object; nothing is recomputed here.
"""

from __future__ import annotations

from layerprobe.core import CORPUS_TASK, markdown_text
from layerprobe.results import ANGULAR_KIND, StabilityInput, StabilityPair, StabilityResult

DIRECTION = (
    "Blocks are ranked from most to least prunable: angular inputs by the adjacent distance d(x^l, x^(l+1)) "
    "(smallest first), prune-drop inputs by the score lost when the block is removed (−ΔP for a higher-is-better "
    "metric, +ΔP for a lower-is-better one; smallest first)."
)
SHOWN_RANKING = 8  # blocks of each ranking shown in tables


def ranked_by(item: StabilityInput) -> str:
    """What an input's ranking is by: `d(x^l, x^l+1)` or `−ΔP arc_easy/acc`."""
    if item.kind == ANGULAR_KIND:
        return "d(x^l, x^l+1)"
    return f"{'−' if item.higher_is_better else '+'}ΔP {item.task}/{item.metric}"


def data_text(item: StabilityInput) -> str:
    """A short description of what an input was measured on."""
    data = item.data
    if item.kind == ANGULAR_KIND:
        tokens = data.get("tokens")
        parts = [str(data.get("dataset")), f"{tokens:,} tokens" if isinstance(tokens, int) else ""]
        parts.append(f"positions {data.get('positions')}" if data.get("positions") else "")
        parts.append("chat template" if data.get("chat_template") else "")
        return ", ".join(p for p in parts if p)
    corpus = data.get("corpus") if item.task == CORPUS_TASK else None
    unit = "windows" if isinstance(corpus, dict) else "documents"
    parts = [f"{data.get('samples')} {unit}" if data.get("samples") is not None else ""]
    if isinstance(corpus, dict):
        parts.append(f"{corpus.get('dataset')}" + (", chat template" if corpus.get("chat_template") else ""))
    elif data.get("num_fewshot") is not None:
        parts.append(f"{data.get('num_fewshot')}-shot")
    return ", ".join(p for p in parts if p)


def resampled_text(item: StabilityInput) -> str:
    """How the input's intervals were drawn: `256 windows`, `400 documents` or `stderr (parametric)`."""
    return f"{item.units:,} {item.resampled}" if item.units is not None else "stderr (parametric)"


def ranking_text(item: StabilityInput, shown: int = SHOWN_RANKING) -> str:
    """The first blocks of an input's ranking, most prunable first."""
    return ", ".join(map(str, item.ranking[:shown])) + (", …" if len(item.ranking) > shown else "")


def value_with_interval(value: float | None, interval: list[float] | None, digits: int = 2) -> str:
    """`0.71 [0.52, 0.85]`; `—` for an undefined value, no interval where none is defined."""
    if value is None:
        return "—"
    text = f"{value:.{digits}f}"
    if interval is not None and all(bound == bound for bound in interval):  # NaN bounds: undefined
        text += f" [{interval[0]:.{digits}f}, {interval[1]:.{digits}f}]"
    return text


def pair_name(result: StabilityResult, pair: StabilityPair) -> str:
    """`c4 vs wikitext`: the two inputs' labels."""
    return f"{result.inputs[pair.first].label} vs {result.inputs[pair.second].label}"


def stability_markdown(result: StabilityResult) -> str:
    """The whole result as a markdown report: inputs, rank correlations, lowest-k overlaps, notes."""
    settings = result.settings
    lines = [
        f"# Ranking stability: {markdown_text(result.model.label)}",
        "",
        f"{len(result.inputs)} inputs, {len(result.blocks)} blocks compared "
        f"({_blocks_text(result.blocks, result.model.num_layers)}). {DIRECTION}",
        f"Intervals: percentile bootstrap, {_percent(settings.get('confidence'))} "
        f"({settings.get('draws')} draws, seed {settings.get('seed')}); each input redrawn from its own windows or "
        "documents, or from its standard errors where those are missing (parametric, marked below).",
        "",
        "## Inputs",
        "",
        "| # | input | kind | ranked by | measured on | intervals from | most prunable first |",
        "|---|---|---|---|---|---|---|",
    ]
    for i, item in enumerate(result.inputs, start=1):
        cells = [item.label, item.kind, ranked_by(item), data_text(item), resampled_text(item), ranking_text(item)]
        lines.append(f"| {i} | " + " | ".join(map(markdown_text, cells)) + " |")
    lines += [
        "",
        "## Rank correlation",
        "",
        "| pair | Kendall τ-b [95 %] | Spearman ρ [95 %] | interval |",
        "|---|---|---|---|",
    ]
    for pair in result.pairs:
        tau = value_with_interval(pair.kendall_tau_b, pair.kendall_tau_b_ci95)
        rho = value_with_interval(pair.spearman_rho, pair.spearman_rho_ci95)
        lines.append(f"| {markdown_text(pair_name(result, pair))} | {tau} | {rho} | {pair.method.replace('_', ' ')} |")
    lines += [
        "",
        "## Overlap of the k most prunable blocks (Jaccard, [95 %])",
        "",
        "Chance: the expected overlap of two unrelated rankings.",
        "",
        "| k | chance | " + " | ".join(markdown_text(pair_name(result, p)) for p in result.pairs) + " |",
        "|---|---|" + "---|" * len(result.pairs),
    ]
    for index, k in enumerate(result.ks):
        cells = [value_with_interval(p.jaccard_lowest_k[index], p.jaccard_lowest_k_ci95[index]) for p in result.pairs]
        lines.append(f"| {k} | {result.jaccard_chance[index]:.2f} | " + " | ".join(cells) + " |")
    if result.notes:
        lines += ["", "## Notes", ""] + [f"- {markdown_text(note)}" for note in result.notes]
    return "\n".join(lines) + "\n"


def _percent(confidence: object) -> str:
    return f"{100 * confidence:.0f} %" if isinstance(confidence, float) else "95 %"


def _blocks_text(blocks: list[int], num_layers: int) -> str:
    if blocks == list(range(num_layers)):
        return f"all {num_layers}"
    return f"{', '.join(map(str, blocks))} of {num_layers}"
