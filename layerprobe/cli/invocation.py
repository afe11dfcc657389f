"""What every command shares about how it was called: `--config run.yaml`, and the command line it records.

`--config FILE` reads a YAML mapping of option names to values (`seq_len: 512` or `seq-len: 512`, a list
for an option given several times, the model under `model`) before any other option is read, and hands
it to click as the command's `default_map`: so the command line overrides the file, the file overrides
the defaults, and each value passes the same conversion and checks as when typed. An unknown key, a file
that is not a mapping or a value of the wrong shape is one line and exit 2, before anything loads.

`recorded_command_line` turns the values a command actually ran with back into `layerprobe ARGS…`:
every argument, and every option that did not come from its default (typed, from `--config` or from the
environment). Results store it (`run.command`, with the folder it ran in), so `layerprobe rerun` can
repeat a run without the YAML file it may have come from.
"""

from __future__ import annotations

import enum
import functools
import inspect
import os
import typing
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Annotated, Any

import typer

from layerprobe.cli.console import print_error
from layerprobe.core import Invocation, input_digests, set_invocation

CONFIG_PARAMETER = "config"
OUTPUT_PARAMETERS = {"out", "save"}  # where a command writes: not an input to digest
CONTEXT_PARAMETER = "layerprobe_context"  # Typer hands the click context to a parameter typed typer.Context
USAGE_ERROR = 2


def option_name(key: object) -> str:
    """A YAML key as click's parameter name: `seq-len`, `--seq-len` and `seq_len` are all `seq_len`."""
    return str(key).lstrip("-").replace("-", "_")


def read_config(path: Path, command: Any) -> dict[str, Any]:
    """The YAML file's options for `command`, keyed by parameter name; `ValueError` says what is wrong."""
    import yaml  # a dependency of datasets and lm-eval; only read when --config is given

    try:
        loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValueError(f"cannot read --config {path}: {exc.strerror or exc}") from None
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValueError(f"--config {path} is not valid YAML: {first}") from None
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise ValueError(f"--config {path} must be a mapping of option names to values, got a {type(loaded).__name__}")
    params = {p.name: p for p in command.params if p.name and p.name != CONFIG_PARAMETER}
    values: dict[str, Any] = {}
    for key, value in loaded.items():
        name = option_name(key)
        param = params.get(name)
        if param is None:
            known = ", ".join(sorted(n.replace("_", "-") for n in params))
            raise ValueError(f"--config {path}: unknown option {key!r} for `{command.name}` (it takes: {known})")
        if isinstance(value, dict):
            raise ValueError(f"--config {path}: {key} must be a value or a list, not a mapping")
        if isinstance(value, list) and not (param.multiple or param.nargs == -1):
            raise ValueError(f"--config {path}: {key} takes one value, got a list")
        flag = getattr(param, "is_flag", False) or getattr(getattr(param, "type", None), "name", "") == "boolean"
        shown = [item for item in (value if isinstance(value, list) else [value]) if isinstance(item, bool)]
        if shown and not flag:  # click would read true as 1 and false as 0 (a LoRA rank of 1, a seq_len of 1)
            raise ValueError(f"--config {path}: {key} takes a value, not {str(shown[0]).lower()}")
        if name in values:
            raise ValueError(f"--config {path}: {key} is given twice (as {option_name(key)} spelled two ways)")
        values[name] = value
    return values


def load_config(ctx: typer.Context, value: Path | None) -> Path | None:
    """The eager `--config` callback: the file's values become the defaults of every later option."""
    if value is None or ctx.resilient_parsing:
        return value
    try:
        values = read_config(value, ctx.command)
    except ValueError as exc:
        print_error(str(exc), "Name each option as in `--help` (seq-len or seq_len); the command line overrides it.")
        raise typer.Exit(USAGE_ERROR) from None
    ctx.default_map = {**(ctx.default_map or {}), **values}
    return value


ConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--config",
        is_eager=True,
        callback=load_config,
        metavar="RUN.yaml",
        help="Read options from a YAML mapping (`seq_len: 512`, `task` as a YAML list, `model: ./ckpt`); "
        "options typed on the command line override it. Unknown keys are refused.",
        rich_help_panel="Output",
        show_default=False,
    ),
]


def with_config_option(command: Callable[..., None]) -> Callable[..., None]:
    """`command` with `--config` added to the signature Typer reads; records the command line, then runs it.

    The click context reaches the wrapper through a parameter typed `typer.Context` (Typer fills it in
    and shows it nowhere), which works whether Typer uses click or its own copy of it.
    """
    signature = inspect.signature(command)
    added = [
        inspect.Parameter(CONFIG_PARAMETER, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=ConfigOption),
        inspect.Parameter(CONTEXT_PARAMETER, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=typer.Context),
    ]

    @functools.wraps(command)
    def configured(*args: object, **kwargs: Any) -> None:
        kwargs.pop(CONFIG_PARAMETER, None)
        ctx = kwargs.pop(CONTEXT_PARAMETER, None)
        set_invocation(recorded_command_line(ctx, ctx.info_name or command.__name__) if ctx is not None else None)
        try:
            command(*args, **kwargs)
        finally:
            set_invocation(None)

    # Typer reads this signature as it is: annotations resolved here (a module written with
    # `from __future__ import annotations` holds them as text), as `takes_groups` does.
    hints = typing.get_type_hints(command, include_extras=True)
    parameters = [
        p.replace(kind=inspect.Parameter.KEYWORD_ONLY, annotation=hints.get(name, p.annotation))
        for name, p in signature.parameters.items()
    ]
    configured.__signature__ = signature.replace(parameters=[*parameters, *added])  # type: ignore[attr-defined]
    configured.__annotations__ = {p.name: p.annotation for p in [*parameters, *added]} | {"return": None}
    return configured


def _shown(value: object) -> str:
    """A value as it is typed: an enum member by its value, a path as its text."""
    return str(value.value) if isinstance(value, enum.Enum) else str(value)


def _option_words(param: Any, value: Any) -> list[str]:
    """One option and its value as command-line words (flags by their on/off spelling, lists repeated)."""
    flag = param.opts[0]
    if param.is_flag:
        if param.secondary_opts:
            return [flag] if value else [param.secondary_opts[0]]
        return [flag] if value else []
    if param.count:
        return [flag] * int(value or 0)
    if param.multiple:
        return [word for item in (value or ()) for word in (flag, _shown(item))]
    if isinstance(value, tuple | list):
        return [flag, *(_shown(item) for item in value)]
    return [flag, _shown(value)]


def recorded_command_line(ctx: typer.Context, name: str) -> Invocation:
    """`name ARGS…` as the command actually ran: arguments, then every option not left at its default."""
    words: list[str] = [name]
    options: list[str] = []
    read: list[str] = []  # option values that may name input files
    for param in ctx.command.params:
        if not param.name or param.name in (CONFIG_PARAMETER, CONTEXT_PARAMETER) or param.name not in ctx.params:
            continue
        value = ctx.params[param.name]
        if param.param_type_name == "argument":
            many = param.nargs == -1 and isinstance(value, Iterable) and not isinstance(value, str)
            words += [_shown(v) for v in value] if many else [_shown(value)]
            continue
        source = ctx.get_parameter_source(param.name)
        if source is None or source.name == "DEFAULT" or value is None or param.param_type_name != "option":
            continue
        words_of_option = _option_words(param, value)
        options += words_of_option
        if param.name not in OUTPUT_PARAMETERS:
            read += words_of_option[1:]
    cwd = os.getcwd()
    # The model (the first argument) is pinned by its weights' fingerprint, not by reading gigabytes here.
    return Invocation(argv=tuple(words + options), cwd=cwd, inputs=input_digests(words[2:] + read, cwd))
