"""Progress callbacks: the library reports long work through them and never prints.

Besides the stage bar (`on_stage`, `on_advance`), two event hooks let a caller watch the work itself
without patching private functions: `on_evaluation` after every finished (task, variant) evaluation
of prune-drop, `on_block` after every forward pass of one block during evaluation. Tests and
benchmarks observe runs through them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from layerprobe.model.stack import BlockArgs, BlockKwargs, LayerStack, PreHook, hidden_from_input

if TYPE_CHECKING:
    from torch import nn

    from layerprobe.results import Evaluation

StageCallback = Callable[[str, "int | None", str], None]


@dataclass(frozen=True)
class EvaluationEvent:
    """One finished evaluation: `variant` None is the baseline, l is "block l removed".

    `scorer` is the object that scored it (its task sets or `last` predictions may be inspected).
    """

    task: str
    variant: int | None
    engine: str
    evaluation: Evaluation
    scorer: object  # a scorer of the evaluate room, above this floor: callers know its class


@dataclass(frozen=True)
class BlockEvent:
    """One forward pass of block `block` (0-based, as in the unpruned model) over `rows` sequences."""

    block: int
    rows: int
    tokens: int


class Progress:
    """Callbacks a caller may pass to follow long work; all optional (the library prints nothing).

    `on_stage(name, total, unit)` starts a stage of `total` units (None: unknown), e.g. tokens or
    evaluations; `on_advance(n)` reports n more units done (a fraction of one evaluation for SQuAD,
    which advances window by window). `on_evaluation(EvaluationEvent)` and `on_block(BlockEvent)`
    report every evaluation and every block pass of prune-drop's evaluations. `on_note(text)` is one line
    the user should read (what a resumed run reused, damaged resume state recomputed, stale files removed).
    `on_detail(text)` is a short figure shown beside the current stage's bar (heal's LoRA: the last loss).
    """

    def __init__(
        self,
        on_stage: StageCallback | None = None,
        on_advance: Callable[[float], None] | None = None,
        on_evaluation: Callable[[EvaluationEvent], None] | None = None,
        on_block: Callable[[BlockEvent], None] | None = None,
        on_note: Callable[[str], None] | None = None,
        on_detail: Callable[[str], None] | None = None,
    ) -> None:
        self.on_stage = on_stage or (lambda _name, _total, _unit: None)
        self.on_advance = on_advance or (lambda _n: None)
        self.on_evaluation = on_evaluation or (lambda _event: None)
        self.on_block = on_block
        self.on_note = on_note or (lambda _text: None)
        self.on_detail = on_detail or (lambda _text: None)

    def stage(self, name: str, total: int | None = None, unit: str = "") -> None:
        """Start a stage (ends the previous one)."""
        self.on_stage(name, total, unit)

    def note(self, text: str) -> None:
        """One line a user should read about how the work is done (e.g. why an engine was chosen)."""
        self.on_note(text)

    def detail(self, text: str) -> None:
        """A short figure about the current stage (e.g. "loss 0.0412"), shown beside its bar."""
        self.on_detail(text)

    @contextlib.contextmanager
    def watching_blocks(self, stack: LayerStack) -> Iterator[None]:
        """Report every forward pass of the stack's blocks to `on_block` while inside (free without it).

        Hooks sit on the block modules themselves, so a pass is attributed to the block's index in the
        unpruned stack even while other blocks are taken out, and stand-ins are never counted.
        """
        if self.on_block is None:
            yield
            return

        report = self.on_block

        def hook(index: int) -> PreHook:
            def count(_module: nn.Module, args: BlockArgs, kwargs: BlockKwargs) -> None:
                hidden = hidden_from_input(args, kwargs)
                rows = int(hidden.shape[0])
                report(BlockEvent(index, rows, rows * int(hidden.shape[1]) if hidden.dim() > 2 else rows))

            return count

        handles = [block.register_forward_pre_hook(hook(i), with_kwargs=True) for i, block in enumerate(stack.blocks)]
        try:
            yield
        finally:
            for handle in handles:
                handle.remove()
