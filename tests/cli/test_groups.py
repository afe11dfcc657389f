"""The option-group mechanism: a dataclass of options becomes keyword-only options of a Typer command, and
the command receives one object per group."""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Annotated

import pytest
import typer
from typer.testing import CliRunner

from layerprobe.cli.app import friendly_errors
from layerprobe.cli.groups import OptionGroup, SpecGroup, command_groups, takes_groups
from layerprobe.core import OptionSpec, parse_memory_size, setting

runner = CliRunner()


@dataclass(frozen=True)
class Size(OptionGroup):
    """A toy group."""

    width: Annotated[int, typer.Option("--width", "--breadth", help="How wide.")] = 3
    height: Annotated[int, typer.Option("--height", help="How high.")] = 4


calls: list[tuple[str, Size, bool]] = []


def area(
    name: Annotated[str, typer.Argument(help="A name.")],
    *,
    size: Size,
    verbose: Annotated[bool, typer.Option("--verbose", help="Say more.")] = False,
) -> None:
    calls.append((name, size, verbose))


def toy_app(command) -> typer.Typer:
    toy = typer.Typer()
    toy.command("area")(friendly_errors(command))
    toy.command("other")(lambda: None)  # two commands keep `area` a subcommand, as in the real app
    return toy


def test_a_group_parameter_becomes_its_options_in_order_and_every_parameter_is_keyword_only():
    command = takes_groups(area)
    signature = inspect.signature(command)
    assert list(signature.parameters) == ["name", "width", "height", "verbose"]
    assert {p.kind for p in signature.parameters.values()} == {inspect.Parameter.KEYWORD_ONLY}
    assert signature.parameters["width"].default == 3 and signature.parameters["height"].default == 4
    assert command_groups(command) == {"size": Size} == command_groups(friendly_errors(command))
    assert command_groups(area) == {}


def test_the_command_receives_one_object_per_group():
    calls.clear()
    toy = toy_app(takes_groups(area))
    assert runner.invoke(toy, ["area", "box", "--breadth", "5", "--verbose"]).exit_code == 0
    assert runner.invoke(toy, ["area", "box"]).exit_code == 0
    assert calls == [("box", Size(width=5, height=4), True), ("box", Size(), False)]
    text = " ".join(runner.invoke(toy, ["area", "--help"]).output.split())
    for option in ("--width", "--breadth", "How wide.", "--height", "How high.", "--verbose", "[default: 3]"):
        assert option in text


def test_an_option_taken_twice_is_refused_when_the_command_is_built():
    def twice(*, size: Size, width: Annotated[int, typer.Option("--w")] = 1) -> None:
        pass

    with pytest.raises(TypeError, match="width"):
        takes_groups(twice)


def test_a_group_option_needs_a_default():
    @dataclass(frozen=True)
    class NoDefault(OptionGroup):
        depth: Annotated[int, typer.Option("--depth")]

    def command(*, thing: NoDefault) -> None:
        pass

    command.__annotations__["thing"] = NoDefault  # a local class: give the resolved type
    with pytest.raises(TypeError, match="needs a default"):
        takes_groups(command)


# --- groups built from the settings a spec declares (core/option_spec.py) ---------------------------------


@dataclass(frozen=True)
class ToySpec:
    """A spec with three declared settings, one of them a size read from text."""

    name: str
    depth: int = setting(2, OptionSpec(("--depth",), "How deep.", "Shape"))
    memory: int = setting(
        1024, OptionSpec(("--memory",), "Bytes.", cli_type=str | None, cli_default=None, parse=parse_memory_size)
    )
    fast: bool = setting(False, OptionSpec(("--fast/--slow",), "Speed."))


@dataclass(frozen=True)
class ToyDepth(SpecGroup):
    SPEC = ToySpec
    FIELDS = ("depth",)


@dataclass(frozen=True)
class ToyRest(SpecGroup):
    SPEC = ToySpec
    REST_OF = (ToyDepth,)


def test_a_spec_group_takes_its_options_from_the_declarations_and_gives_the_spec_its_keywords():
    seen: list[ToySpec] = []

    @takes_groups
    def build(*, depth: ToyDepth, rest: ToyRest) -> None:
        seen.append(ToySpec("x", **depth.spec_fields(), **rest.spec_fields()))

    assert ToyRest.FIELDS == ("memory", "fast")  # every setting the other group does not take, in order
    result = runner.invoke(toy_app(build), ["area", "--depth", "5", "--memory", "1KiB", "--fast"])
    assert result.exit_code == 0, result.output
    assert seen[-1] == ToySpec("x", depth=5, memory=1024, fast=True)
    assert runner.invoke(toy_app(build), ["area"]).exit_code == 0
    assert seen[-1] == ToySpec("x")  # --memory left out: the spec's own default, not None
    shown = runner.invoke(toy_app(build), ["area", "--help"]).output
    assert "Shape" in shown and "--slow" in shown and "How deep." in shown
