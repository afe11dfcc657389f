"""The `layerprobe` Typer app: its commands, `--version`, and how a command ends.

Each command lives in its own module (options in, one library call, a summary out). Here they are
registered under their names and wrapped by `friendly_errors`: a user mistake (`LayerprobeError`)
prints one red line and exits with its status (2), and so does a full disk anywhere; Ctrl-C exits
with 130, and a real bug keeps its traceback. Nothing imported here loads torch, so `--help` is instant.
"""

from __future__ import annotations

import functools
import sys
from typing import Annotated

import typer

import layerprobe
from layerprobe.cli import (
    angular,
    compare,
    curve,
    demo,
    depth,
    export,
    gain,
    heal,
    layers,
    merge,
    plot,
    prune_drop,
    report,
    rerun,
    stability,
    track,
)
from layerprobe.cli.console import err, print_error, quiet_libraries
from layerprobe.cli.groups import Command
from layerprobe.cli.invocation import with_config_option
from layerprobe.core import LayerprobeError, no_space_left
from layerprobe.results import release_run_dirs

INTERRUPTED = 130  # the shell's status for a process ended by SIGINT

app = typer.Typer(
    name="layerprobe",
    help="Which layers of a pretrained Hugging Face checkpoint actually do work.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
    rich_markup_mode="rich",
)


def friendly_errors(command: Command) -> Command:
    """Print user mistakes as one red line (exit 2); let real bugs keep their traceback."""

    @functools.wraps(command)
    def wrapper(*args: object, **kwargs: object) -> None:
        try:
            with quiet_libraries(kwargs.get("quiet") is True):  # --quiet: no library warning lines either
                command(*args, **kwargs)
        except LayerprobeError as exc:
            print_error(exc.message, exc.hint)  # escaped, one line each also in a pipe or log
            raise typer.Exit(exc.exit_code) from None
        except OSError as exc:
            full = no_space_left(exc)  # a full disk outside results' own writes (a journal, a sample log): one line
            if full is None:
                raise
            print_error(full.message, full.hint)
            raise typer.Exit(full.exit_code) from None
        except KeyboardInterrupt:
            err.print("[yellow]interrupted[/]")
            raise typer.Exit(INTERRUPTED) from None
        finally:
            release_run_dirs()  # the --out lock (results/lock.py): the next command may write there

    return wrapper


def print_version(asked: bool) -> None:
    """`--version`: print `layerprobe <version>` and stop before any command runs."""
    if asked:
        typer.echo(f"layerprobe {layerprobe.__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[
        bool,
        typer.Option("--version", callback=print_version, is_eager=True, help="Print the version and exit."),
    ] = False,
) -> None:
    """Which layers of a pretrained Hugging Face checkpoint actually do work."""


COMMANDS: dict[str, Command] = {
    "angular": angular.angular,
    "demo": demo.demo,
    "depth": depth.depth,
    "prune-curve": curve.prune_curve,
    "prune-drop": prune_drop.prune_drop,
    "merge": merge.merge,
    "prune": export.prune,
    "heal": heal.heal,
    "gain": gain.gain,
    "layers": layers.layers,
    "plot": plot.plot,
    "compare": compare.compare,
    "stability": stability.stability,
    "track": track.track,
    "report": report.report,
    "rerun": rerun.rerun,
}
for name, command in COMMANDS.items():
    app.command(name)(friendly_errors(with_config_option(command)))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(app())
