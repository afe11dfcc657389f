"""Option groups: options several commands share, declared once as the fields of a frozen dataclass.

A group is a frozen dataclass (subclass of `OptionGroup`) whose fields are annotated
`Annotated[type, typer.Option(...)]` with a default, exactly as a Typer parameter would be. A command
names the group as one keyword-only parameter; `takes_groups` replaces that parameter in the signature
Typer reads (`__signature__`, which `inspect.signature` honours) by the group's fields, and when the
command runs it gathers their values back into one group object. So each option's spelling, aliases,
help, type and default live in one place, and a command lists only the groups it takes plus its own
options (the mergekit habit).

A `SpecGroup` goes one step further: its options are settings declared on a core spec
(core/option_spec.py), named by `FIELDS`; their Typer options are built from those declarations, and
`spec_fields()` gives the spec's keywords back. So a setting's flag, help, default and panel are written
once, on the spec, for every command that takes it.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import inspect
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar

import typer

from layerprobe.core import SAME, Declared, declared

Command = Callable[..., None]


@dataclass(frozen=True)
class OptionGroup:
    """Base of every option group: a frozen dataclass whose fields are `Annotated[..., typer.Option]`.

    `PANEL` names the `--help` panel its options are listed under (unless an option names its own).
    """

    PANEL: ClassVar[str | None] = None


def spec_option(item: Declared) -> object:
    """The `Annotated[type, typer.Option(...)]` of a declared setting (its panel, if it names one)."""
    option = item.option
    placed = typer.Option(*option.flags, help=option.help, rich_help_panel=option.panel, metavar=option.metavar)
    annotated: Any = Annotated  # built at run time from values: no static type to give it
    return annotated[option.cli_type if option.cli_type is not None else item.type, placed]


def switch_param(flag: str) -> str:
    """The command's parameter name of an on/off switch: `--load-in-4bit` → `load_in_4bit`."""
    return flag.lstrip("-").replace("-", "_")


def switch_option(item: Declared, flag: str, shown: str) -> object:
    """The `Annotated[bool, typer.Option(flag)]` of one switch of a setting chosen by switches."""
    help_text = item.option.help.format(shown=shown)
    annotated: Any = Annotated  # built at run time from values: no static type to give it
    return annotated[bool, typer.Option(flag, help=help_text, rich_help_panel=item.option.panel)]


def cli_default(item: Declared) -> object:
    """The command line's default of a declared setting: its own where declared, else the spec's.

    A setting the spec requires (a field without default, such as prune's --save) is a required option
    (Typer's `...`).
    """
    if item.option.cli_default is not SAME:
        return item.option.cli_default
    return ... if item.default is dataclasses.MISSING else item.default


@dataclass(frozen=True)
class SpecGroup(OptionGroup):
    """A group of settings declared on `SPEC` (core/option_spec.py): `FIELDS` names them, in help order.

    A subclass states `SPEC`, `FIELDS` and `PANEL` only; its dataclass fields (one per setting, named by
    the command's parameter name) are made from the declarations when the class is defined. A group that
    states `REST_OF` (other groups of the same spec) instead of `FIELDS` takes every setting of the spec
    that those groups do not: a setting newly declared on the spec is then an option of the command at once.
    """

    SPEC: ClassVar[type]
    FIELDS: ClassVar[tuple[str, ...]] = ()
    REST_OF: ClassVar[tuple[type[SpecGroup], ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        found = declared(cls.SPEC)
        if cls.REST_OF:
            taken = {name for group in cls.REST_OF for name in group.FIELDS}
            cls.FIELDS = tuple(name for name in found if name not in taken)
        annotations: dict[str, object] = {}
        for name in cls.FIELDS:
            item = found[name]
            if item.option.switches:  # one on/off option per value (--load-in-4bit, --load-in-8bit)
                for flag, _, shown in item.option.switches:
                    annotations[switch_param(flag)] = switch_option(item, flag, shown)
                    setattr(cls, switch_param(flag), False)
                continue
            annotations[item.param] = spec_option(item)
            setattr(cls, item.param, cli_default(item))
        cls.__annotations__ = annotations  # read by @dataclass, which runs after this

    def spec_fields(self) -> dict[str, Any]:
        """The options as the spec's keywords (`PruneSpec(model=…, **group.spec_fields())`).

        A value left at None where the spec's default is not (a size whose help names the default) is
        left out, so the spec's own default applies.
        """
        found = declared(self.SPEC)
        values: dict[str, Any] = {}
        for name in self.FIELDS:
            item = found[name]
            if item.option.switches:
                chosen = [value for flag, value, _ in item.option.switches if getattr(self, switch_param(flag))]
                values[name] = item.option.parse(chosen) if item.option.parse is not None else chosen
                continue
            value = getattr(self, item.param)
            if value is None:
                if item.default is None:
                    values[name] = None
                continue
            values[name] = item.option.parse(value) if item.option.parse is not None else value
        return values


def in_panel(annotation: object, panel: str | None) -> object:
    """`Annotated[type, typer.Option(...)]` with the option placed in `panel` (a copy: the alias stays as it was)."""
    if panel is None or typing.get_origin(annotation) is not Annotated:
        return annotation
    base, *metadata = typing.get_args(annotation)
    placed = []
    for item in metadata:
        if hasattr(item, "rich_help_panel") and item.rich_help_panel is None:
            item = copy.copy(item)
            item.rich_help_panel = panel
        placed.append(item)
    annotated: Any = Annotated  # built at run time from values: no static type to give it
    return annotated[tuple([base, *placed])]


def group_parameters(group: type[OptionGroup]) -> list[inspect.Parameter]:
    """The group's fields as keyword-only parameters, in field order, with their Annotated types and defaults."""
    hints = typing.get_type_hints(group, include_extras=True)
    parameters = []
    for field in dataclasses.fields(group):
        if field.default is dataclasses.MISSING:
            raise TypeError(f"{group.__name__}.{field.name} needs a default: a group's options are optional.")
        parameters.append(
            inspect.Parameter(
                field.name,
                inspect.Parameter.KEYWORD_ONLY,
                default=field.default,
                annotation=in_panel(hints[field.name], group.PANEL),
            )
        )
    return parameters


def command_groups(command: Command) -> dict[str, type[OptionGroup]]:
    """Parameter name → group, for a command built by `takes_groups` (empty for any other function)."""
    return dict(getattr(command, "option_groups", {}))


def takes_groups(command: Command) -> Command:
    """Expand the `OptionGroup` parameters of `command` into their options for Typer; pass one object per group.

    The command's other parameters are kept as they are, in order. Every parameter of the result is
    keyword-only (Typer calls commands by keyword), so a group may follow an option with a default.
    Two options of the same name (from two groups, or a group and the command) are refused at once.
    """
    hints = typing.get_type_hints(command, include_extras=True)
    groups: dict[str, type[OptionGroup]] = {}
    parameters: list[inspect.Parameter] = []
    for name, parameter in inspect.signature(command).parameters.items():
        annotation = hints.get(name, parameter.annotation)
        if isinstance(annotation, type) and issubclass(annotation, OptionGroup):
            groups[name] = annotation
            parameters += group_parameters(annotation)
        else:
            parameters.append(parameter.replace(kind=inspect.Parameter.KEYWORD_ONLY, annotation=annotation))
    names = [p.name for p in parameters]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise TypeError(f"{command.__name__} takes the option(s) {', '.join(twice)} twice.")

    @functools.wraps(command)
    def gathered(**values: object) -> None:
        for name, group in groups.items():
            values[name] = group(**{f.name: values.pop(f.name) for f in dataclasses.fields(group)})
        command(**values)

    gathered.__signature__ = inspect.Signature(parameters, return_annotation=None)  # type: ignore[attr-defined]
    gathered.__annotations__ = {p.name: p.annotation for p in parameters} | {"return": None}
    gathered.option_groups = groups  # type: ignore[attr-defined]
    return gathered
