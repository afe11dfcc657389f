"""How an agreement block (ΔP against the angular distance) names its distances: by the span it compares.

A span-n prune-drop compares ΔP with d(x^l, x^(l+n)); older files called those `adjacent_distance` and
kept the span only in `settings.span`. These helpers read both forms, so every printer and plot labels
the distances by what they are.
"""

from __future__ import annotations

from collections.abc import Mapping


def span_distance_label(span: int) -> str:
    """How the angular distance a span-n variant is compared with reads: d(x^l, x^(l+1)), d(x^l, x^(l+2))…."""
    return f"d(x^l, x^(l+{span}))"


def agreement_span(agreement: Mapping[str, object], settings: Mapping[str, object]) -> int:
    """The span of an agreement block: its own `span`, else the run's `settings.span` (older files), else 1."""
    for value in (agreement.get("span"), settings.get("span")):
        if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
            return value
    return 1


def agreement_distances(agreement: Mapping[str, object]) -> list[float] | None:
    """d(x^l, x^(l+n)) for each of the agreement's layers: `span_distance`, or `adjacent_distance` in older files."""
    for key in ("span_distance", "adjacent_distance"):
        value = agreement.get(key)
        if isinstance(value, list):
            return [float(v) for v in value]
    return None
