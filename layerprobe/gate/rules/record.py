"""What every rule returns, `RuleResult`, and the few helpers all rules share to decide and explain it.

A verdict must explain itself without the reader opening the code, so each check carries its own
criterion, the numbers it measured and the limit it applied.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

# A change exactly equal to its tolerance passes; this slack keeps float rounding from failing it.
EPS = 1e-9
# Data settings that, when they differ, make two runs measure different things (tokens and positions
# change the noise): the verdict still stands, but a reader must know.
DATA_WATCHED = ("dataset", "config", "split", "tokens", "positions", "seq_len")


@dataclass(frozen=True)
class RuleResult:
    """One check of one kind (and, for prune-drop, one task): what was required, measured and decided.

    `change` is how much worse the candidate is in the rule's own units (positive = worse) and `limit`
    the largest change that passes, so every rule reads the same way: passed ⇔ change ≤ limit. People
    read `difference` (candidate − baseline) with `worse_if` ("higher" or "lower": which sign of the
    difference counts against the candidate); that is what every output (table, markdown, JSON `change`,
    JUnit) shows as the change, and `change` itself is written as `worsening`.
    """

    kind: str
    rule: str
    subject: str | None
    criterion: str
    thresholds: dict[str, float | bool]
    baseline: float | None
    candidate: float | None
    change: float | None
    limit: float
    passed: bool
    message: str
    details: dict[str, object] = field(default_factory=dict)
    worse_if: str = "higher"
    scale: str = "absolute"  # "ratio": change and limit are candidate / baseline (depth's rms_growth)

    @property
    def difference(self) -> float | None:
        """The candidate minus the baseline, in the rule's units (None when either is missing).

        Every output shows this as the change, so its sign always reads candidate − baseline; for a
        "ratio" rule the ratio candidate / baseline (which its limit bounds) is shown beside it.
        """
        if self.baseline is None or self.candidate is None:
            return None
        if self.baseline == self.candidate:  # equal infinities are no change, as in `change`
            return 0 if isinstance(self.baseline, int) else 0.0
        return self.candidate - self.baseline

    @property
    def allowed_difference(self) -> float:
        """The bound on `difference` that passes: ≤ +limit when higher is worse, ≥ −limit when lower is."""
        return self.limit if self.worse_if == "higher" else -self.limit

    @property
    def name(self) -> str:
        """The rule's name with its subject, e.g. `layer_delta[arc_easy/acc]`: unique within a kind."""
        return f"{self.rule}[{self.subject}]" if self.subject else self.rule


def within(change: float, limit: float) -> bool:
    """Whether a change passes its limit (with EPS slack); NaN cannot be verified, so it fails."""
    return not math.isnan(change) and change <= limit + EPS


def change_text(change: float, worse: str, better: str) -> str:
    """A change in words for a message: "fell by 0.0123", "rose by 0.0040" or "unchanged"."""
    return f"{worse if change > 0 else better} by {abs(change):.4f}" if change else "unchanged"


def data_notes(baseline: Mapping[str, object], candidate: Mapping[str, object]) -> list[str]:
    """One note per DATA_WATCHED setting that differs between the two runs' `data` blocks."""
    return [
        f"data.{k} differs: baseline {baseline.get(k)!r}, candidate {candidate.get(k)!r}"
        for k in DATA_WATCHED
        if baseline.get(k) != candidate.get(k)
    ]
