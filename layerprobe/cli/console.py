r"""Rich output of the command line: results on stdout (`out`), progress, warnings and errors on stderr (`err`).

`RichProgress` turns the library's progress callbacks into one bar per stage, `StageSpinner` into one
transient spinner line for short steps; `print_error` prints a user mistake. Nothing here imports torch.

Both consoles are `SafeConsole`s: whatever they print passes `safe_text`, so a user's string (a path, a
`--model-args` key, a task name, an error quoting either) can never move the cursor, clear the screen or
retitle the terminal (its control characters are shown as `\x1b`, `\x0d`…), and no secret is printed
(core/redact.py).
"""

from __future__ import annotations

import contextlib
import os
import sys
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    Task,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.segment import Segment
from rich.status import Status
from rich.text import Text

from layerprobe.core import scrub, terminal_text
from layerprobe.model import Progress as LibraryProgress

# Wide enough that nothing is cut when output goes to a pipe or a CI log (rich would assume 80 columns).
PIPE_WIDTH = 1000


def safe_text(text: str) -> str:
    r"""`text` fit for a terminal: control characters shown as `\x1b`, `\x0d`…, no secret (`<redacted>`).

    A lone surrogate (a name read from a JSON `"\udcff"` or a non-UTF-8 file name) is shown as `\udcff`,
    so printing it never fails with UnicodeEncodeError.
    """
    return terminal_text(scrub(text))


class SafeConsole(Console):
    """A rich console that escapes control characters in the text it prints and removes secrets.

    Rich's own cursor moves and colours (control segments and styles) pass unchanged: only the text
    of a segment, where a user's string ends up, is escaped. A string is escaped before rich reads it
    too (`render_str`: printed text, table cells, bar descriptions), since rich silently drops a bell or a
    carriage return when it builds its `Text`, long before the segments are rendered.
    """

    def render_str(self, text: str, **kwargs: Any) -> Text:
        return super().render_str(safe_text(text), **kwargs)

    def _render_buffer(self, buffer: Iterable[Segment]) -> str:
        safe = (segment if segment.control else Segment(safe_text(segment.text), segment.style) for segment in buffer)
        return scrub(super()._render_buffer(safe))  # also a secret that styles split across segments


def make_console(stderr: bool = False) -> Console:
    """A console that never hard-wraps what a log or pipe reads: paths, `wrote …` lines and tables stay whole.

    On a terminal rich fits the window as usual; elsewhere (pipe, file, CI log) lines are soft-wrapped, i.e.
    printed whole, and tables are laid out for a wide page.
    """
    console = SafeConsole(stderr=stderr, soft_wrap=True)
    if not console.is_terminal:  # also over an exported COLUMNS=80, which some shells and runners set
        console.size = (PIPE_WIDTH, 25)  # both: with TERM=dumb rich would otherwise fall back to 80 columns
    return console


out = make_console()
err = make_console(stderr=True)


class RichProgress:
    """Adapts the library's progress callbacks to one rich bar per stage, on stderr."""

    def __init__(self, quiet: bool, notes: bool = True) -> None:
        """Bars unless `quiet`; the library's notes (one line each, on stderr) unless `notes` is False."""
        self.quiet = quiet
        self.notes = notes
        self.bar = Progress(
            SpinnerColumn(),
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[rate]}"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=err,
            disable=quiet,
            transient=False,
        )
        self.task: TaskID | None = None
        self.unit = ""
        self.shown = ""  # the stage's detail (a loss), shown before its rate

    def stage(self, name: str, total: int | None, unit: str = "") -> None:
        self._finish_current()
        self.unit = unit
        self.shown = ""
        self.task = self.bar.add_task(escape(name), total=total, rate="")

    def _finish_current(self) -> None:
        if self.task is None:
            return
        current = self.bar.tasks[self.task]
        total = current.total if current.total is not None else 1  # a stage of unknown length: just "done"
        self.bar.update(self.task, total=total, completed=total)
        self.bar.stop_task(self.task)

    def advance(self, amount: float) -> None:
        if self.task is None:
            return
        self.bar.advance(self.task, amount)
        speed = _mean_rate(self.bar.tasks[self.task])
        rate = ""
        if speed and self.unit:
            rate = f"{speed:,.0f} {self.unit}/s" if speed >= 10 else f"{speed:.2g} {self.unit}/s"
        if rate or self.shown:
            self.bar.update(self.task, rate=" · ".join(part for part in (self.shown, rate) if part))

    def detail(self, text: str) -> None:
        """A short figure about the stage (heal's LoRA loss), shown beside the rate from the next advance."""
        self.shown = escape(text)

    def note(self, text: str) -> None:
        """One line the library wants read: on stderr, above the bars, also under --quiet."""
        if self.notes:
            err.print(f"note: {escape(text)}", highlight=False, soft_wrap=True)

    def callbacks(self) -> LibraryProgress:
        return LibraryProgress(on_stage=self.stage, on_advance=self.advance, on_note=self.note, on_detail=self.detail)

    @contextlib.contextmanager
    def running(self) -> Iterator[RichProgress]:
        """Show the bars while inside; on an error they are cleared first, so the message stands alone."""
        with self.bar:
            try:
                yield self
            except BaseException:
                for task in list(self.bar.task_ids):  # the live display redraws empty when it stops
                    self.bar.remove_task(task)
                self.task = None
                raise
            self._finish_current()


def _mean_rate(task: Task) -> float | None:
    """Units per second since the stage started: what was done over the time it took.

    Not rich's `speed`, which divides the units of its last few samples by the time between them: a burst
    of advances a millisecond apart (a batch's evaluations reported together) read as "24,084 eval/s"
    for 12 evaluations that took 36 s.
    """
    elapsed = task.elapsed
    return task.completed / elapsed if elapsed and elapsed > 0 else None


class StageSpinner:
    """The library's stages as one transient spinner line on stderr: for short steps that count nothing."""

    def __init__(self) -> None:
        self.status: Status | None = None

    def stage(self, name: str, _total: int | None = None, _unit: str = "") -> None:
        if self.status is None:
            self.status = err.status(escape(name))
            self.status.start()
        else:
            self.status.update(escape(name))

    def callbacks(self) -> LibraryProgress:
        return LibraryProgress(on_stage=self.stage)

    @contextlib.contextmanager
    def running(self) -> Iterator[StageSpinner]:
        """Spin while inside; the line is gone afterwards, also on an error."""
        try:
            yield self
        finally:
            if self.status is not None:
                self.status.stop()
                self.status = None


def print_error(message: str, hint: str | None = None) -> None:
    """A user mistake: one red line and an optional dim hint, on stderr, printed as text (never as markup).

    Messages quote user input (paths, task names, TOML sections such as `[angular]`) that rich would
    otherwise read as markup tags and silently drop; their control characters are shown escaped (rich
    itself would drop a carriage return silently).
    """
    err.print(f"[bold red]error:[/] {escape(safe_text(message))}", highlight=False, soft_wrap=True)
    if hint:
        err.print(f"[dim]hint: {escape(safe_text(hint))}[/]", highlight=False, soft_wrap=True)


def print_task_code(files: list[Path]) -> None:
    """One line on stderr naming the Python files local task YAMLs will run (lm-eval's `!function`)."""
    if files:
        err.print(
            f"note: the local task YAMLs run Python code (lm-eval's !function): {', '.join(map(str, files))}",
            highlight=False,
            markup=False,
            soft_wrap=True,
        )


# Python warnings that libraries print as lines of their own (deprecations, "you may want to…" notes).
QUIET_WARNINGS = (FutureWarning, UserWarning, DeprecationWarning)


@contextlib.contextmanager
def quiet_libraries(quiet: bool) -> Iterator[None]:
    """Under `--quiet`: no library warning lines (Python warnings of `QUIET_WARNINGS`, transformers' log).

    Errors still print. transformers reads `TRANSFORMERS_VERBOSITY` when first imported, which a command
    does later (never here: `--help` stays light); an already imported transformers is set directly.
    """
    if not quiet:
        yield
        return
    saved = os.environ.get("TRANSFORMERS_VERBOSITY")
    os.environ["TRANSFORMERS_VERBOSITY"] = "error"
    hf_logging = getattr(sys.modules.get("transformers.utils.logging"), "set_verbosity", None)
    level = sys.modules["transformers.utils.logging"].get_verbosity() if hf_logging else None
    try:
        with warnings.catch_warnings():
            for category in QUIET_WARNINGS:
                warnings.simplefilter("ignore", category)
            if hf_logging is not None:
                hf_logging(40)  # logging.ERROR
            yield
    finally:
        if hf_logging is not None and level is not None:
            hf_logging(level)
        if saved is None:
            os.environ.pop("TRANSFORMERS_VERBOSITY", None)
        else:
            os.environ["TRANSFORMERS_VERBOSITY"] = saved
