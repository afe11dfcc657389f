"""A setting declared once, on the spec field that holds it: its flag, help, panel, and where it is recorded.

A spec field made with `setting(default, OptionSpec(...))` carries everything about the setting in its
dataclass metadata. From that one declaration the command line builds the Typer option of every command
that takes it (`cli/groups.py`: `SpecGroup`), the resume fingerprint and the `settings` block of a result
are written (`fingerprint_values`, `recorded_values`), the result reader checks that block
(`results`: its reading table is derived from `recorded_options`), and docs/cli.md is generated from the
app. Adding a setting to a command therefore touches its spec and its tests. Pure Python: core stays
free of Typer; the CLI turns an `OptionSpec` into a `typer.Option`.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

# The --help panels, in the order a reader needs them (the common ones first).
LOADING_PANEL = "Model loading"
CORPUS_PANEL = "Corpus"
TASKS_PANEL = "Tasks and evaluation"
STATISTICS_PANEL = "Statistics"
SCALE_PANEL = "Scale"
OUTPUT_PANEL = "Output"

OPTION = "layerprobe.option"  # the metadata key of a declared setting
SAME = object()  # OptionSpec.cli_default: the command line's default is the spec's own
OMITTED = object()  # OptionSpec.otherwise: a setting whose `only_when` is false is left out of the record


@dataclass(frozen=True)
class OptionSpec:
    """Everything about one setting besides its name and default (those are the spec field's).

    Attributes:
        flags: The option's spellings, first the one shown (`--prefix-reuse/--no-prefix-reuse` for an
            on/off pair; lm-eval's underscore spellings as aliases).
        help: The `--help` text.
        panel: The `--help` panel (None: the command's general options).
        cli_type: What the command line reads when it differs from the field's type (a `Literal` of the
            choices, `str` for a size such as 2GiB, `Path` for a file); None: the field's type.
        cli_default: The command line's default when it differs from the spec's (e.g. None for an option
            whose help names the default); `SAME`: the spec's.
        parse: Turns the command-line value into the field's value (None: taken as it is). A value left
            at None where the spec's default is not None is not passed: the spec's default applies.
        param: The command's parameter name (and `--config` key) when it differs from the field's name.
        metavar: The value's name in `--help`.
        fingerprint: Whether it changes a score: two runs may share a progress file only if it agrees.
        recorded: Whether the result's `settings` block records it.
        only_when: The name of a boolean property of the spec; the setting is fingerprinted and recorded
            only where it is true (e.g. `sequential` for --precision and --round-size).
        otherwise: What is recorded where `only_when` is false: `OMITTED` (left out), or a value (e.g. None
            for a hub dataset's config when the corpus is a local file).
        switches: For a setting chosen by on/off flags rather than one option (`--load-in-4bit`,
            `--load-in-8bit` → quantization "4bit" / "8bit"): each switch's flag, the value it sets and
            how its help names it (`help` is formatted with `shown`). `parse` then receives the list of
            the values switched on (and refuses two).
        key: The name it is fingerprinted and recorded under, when not the field's.
        recorded_as: The name of a spec property whose value is fingerprinted and recorded instead of the
            field's (prune-curve's --methods: the methods its default chooses; --baseline-seeds: the seeds).
        files: The value names files or a folder: fingerprinted by a digest of their size and time.
        minimum: The smallest value a result may record (checked when a result is read).
        older_default: Results written before the setting existed read back with the spec's default.
    """

    flags: tuple[str, ...]
    help: str
    panel: str | None = None
    cli_type: object = None
    cli_default: object = SAME
    parse: Callable[[Any], Any] | None = None
    param: str | None = None
    metavar: str | None = None
    fingerprint: bool = False
    recorded: bool = False
    only_when: str | None = None
    otherwise: object = OMITTED
    switches: tuple[tuple[str, str, str], ...] = ()
    key: str | None = None
    recorded_as: str | None = None
    files: bool = False
    minimum: float | None = None
    older_default: bool = False


def setting(default: Any, option: OptionSpec, *, factory: Callable[[], Any] | None = None) -> Any:
    """A spec field with `default` (or made by `factory`, for a mutable one) whose setting `option` declares."""
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata={OPTION: option})
    return dataclasses.field(default=default, metadata={OPTION: option})


@dataclass(frozen=True)
class Declared:
    """One declared setting of a spec class: its field, its Python type and its declaration."""

    name: str
    type: object
    default: Any
    option: OptionSpec

    @property
    def param(self) -> str:
        """The command's parameter name (and `--config` key)."""
        return self.option.param or self.name

    @property
    def key(self) -> str:
        """The name it is fingerprinted and recorded under."""
        return self.option.key or self.name


def declared(spec: type) -> dict[str, Declared]:
    """Field name → declaration, for every declared setting of a spec class, in field order."""
    hints = typing.get_type_hints(spec)
    return {
        field.name: Declared(field.name, hints[field.name], _default(field), field.metadata[OPTION])
        for field in dataclasses.fields(spec)
        if OPTION in field.metadata
    }


def _default(field: dataclasses.Field[Any]) -> Any:
    return field.default_factory() if field.default_factory is not dataclasses.MISSING else field.default


def recorded_options(spec: type) -> dict[str, Declared]:
    """Recorded key → declaration: what a result's `settings` block may hold of this spec."""
    return {d.key: d for d in declared(spec).values() if d.option.recorded}


def _applying(spec: object, wanted: Callable[[Declared], bool]) -> Iterator[tuple[Declared, Any]]:
    for item in declared(type(spec)).values():
        when = item.option.only_when
        if not wanted(item):
            continue
        if when is None or getattr(spec, when):
            value = getattr(spec, item.option.recorded_as or item.name)
            yield item, list(value) if isinstance(value, tuple) else value  # as JSON holds it
        elif item.option.otherwise is not OMITTED:
            yield item, item.option.otherwise


def recorded_values(spec: object) -> dict[str, Any]:
    """The spec's recorded settings (`settings` block of its result), in field order."""
    return {item.key: value for item, value in _applying(spec, lambda d: d.option.recorded)}


def named_values(spec: object, names: tuple[str, ...]) -> dict[str, Any]:
    """The settings `names` of `spec` where they apply, under their keys, in the order named.

    What another result records of a spec it runs, when that differs from the spec's own `recorded`
    choice (prune_curve.json records the scoring settings of its PruneSpec).
    """
    found = {item.name: (item.key, value) for item, value in _applying(spec, lambda d: d.name in names)}
    return dict(found[name] for name in names if name in found)


def fingerprint_values(spec: object, digest: Callable[[str], object]) -> dict[str, Any]:
    """The spec's settings that change a score; a file's value is `digest(path)` (None stays None)."""
    return {
        item.key: digest(value) if item.option.files and value is not None else value
        for item, value in _applying(spec, lambda d: d.option.fingerprint)
    }
