"""Progress callbacks: the library reports long work through them and never prints."""

from __future__ import annotations

from collections.abc import Callable

StageCallback = Callable[[str, "int | None", str], None]


class Progress:
    """Callbacks a caller may pass to follow long work; all optional (the library prints nothing).

    `on_stage(name, total, unit)` starts a stage of `total` units (None: unknown), e.g. tokens or
    evaluations; `on_advance(n)` reports n more units done.
    """

    def __init__(self, on_stage: StageCallback | None = None, on_advance: Callable[[int], None] | None = None) -> None:
        self.on_stage = on_stage or (lambda _name, _total, _unit: None)
        self.on_advance = on_advance or (lambda _n: None)

    def stage(self, name: str, total: int | None = None, unit: str = "") -> None:
        """Start a stage (ends the previous one)."""
        self.on_stage(name, total, unit)
