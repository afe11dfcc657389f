"""Rich output of the command line: results on stdout (`out`), progress, warnings and errors on stderr (`err`).

`RichProgress` turns the library's progress callbacks into one bar per stage, `StageSpinner` into one
transient spinner line for short steps; `print_error` prints a user mistake. Nothing here imports torch.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.status import Status

from layerprobe.model import Progress as LibraryProgress

# Wide enough that nothing is cut when output goes to a pipe or a CI log (rich would assume 80 columns).
PIPE_WIDTH = 1000


def make_console(stderr: bool = False) -> Console:
    """A console that never hard-wraps what a log or pipe reads: paths, `wrote …` lines and tables stay whole.

    On a terminal rich fits the window as usual; elsewhere (pipe, file, CI log) lines are soft-wrapped, i.e.
    printed whole, and tables are laid out for a wide page.
    """
    console = Console(stderr=stderr, soft_wrap=True)
    if not console.is_terminal:  # also over an exported COLUMNS=80, which some shells and runners set
        console.size = (PIPE_WIDTH, 25)  # both: with TERM=dumb rich would otherwise fall back to 80 columns
    return console


out = make_console()
err = make_console(stderr=True)


class RichProgress:
    """Adapts the library's progress callbacks to one rich bar per stage, on stderr."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
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

    def stage(self, name: str, total: int | None, unit: str = "") -> None:
        self._finish_current()
        self.unit = unit
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
        speed = self.bar.tasks[self.task].speed
        if speed and self.unit:
            self.bar.update(
                self.task, rate=f"{speed:,.0f} {self.unit}/s" if speed >= 10 else f"{speed:.2g} {self.unit}/s"
            )

    def note(self, text: str) -> None:
        """A line above the bars, on stderr (also under --quiet: it says how the run is done)."""
        err.print(f"note: {escape(text)}", highlight=False, soft_wrap=True)

    def callbacks(self) -> LibraryProgress:
        return LibraryProgress(on_stage=self.stage, on_advance=self.advance, on_note=self.note)

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
    otherwise read as markup tags and silently drop.
    """
    err.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    if hint:
        err.print(f"[dim]hint: {escape(hint)}[/]", highlight=False, soft_wrap=True)
