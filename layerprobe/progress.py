"""Progress callbacks: the library reports long work through them and never prints."""

from __future__ import annotations

from collections.abc import Callable


class Progress:
    """Callbacks a caller may pass to follow long work; all optional (the library prints nothing)."""

    def __init__(self, on_stage: Callable[[str, int | None], None] | None = None,
                 on_advance: Callable[[int], None] | None = None) -> None:
        self.on_stage = on_stage or (lambda _name, _total: None)
        self.on_advance = on_advance or (lambda _n: None)
