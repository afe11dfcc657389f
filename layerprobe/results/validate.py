"""Typed reads of untrusted JSON: every bad value becomes one `ResultError` naming the file and the JSON path.

Result files are read once, into typed objects (one module per kind), so no later code (the gate, the
plots, the console) ever meets a string where a number belongs and crashes with a traceback, or exit 1
that CI would read as "regression". A `Node` is one value of the parsed JSON with its path
(`tasks.mmlu.metrics.acc`); its typed accessors return the value or raise `ResultError('runs/a/angular.json:
data.tokens must be an integer, got "12"')`. Flat records are described by field tables (`read_fields`),
so a new field of a result file is one line in that table.
"""

from __future__ import annotations

import enum
import json
import math
import typing
from collections.abc import Callable
from typing import Any, Literal, NoReturn, TypeVar, overload

from layerprobe.core import PROPORTION_METRICS, Declared, ResultError
from layerprobe.results.json_types import JSONObject, JSONValue

T = TypeVar("T")


class Absent(enum.Enum):
    """The marker of a member the JSON object does not have (distinct from a JSON null)."""

    ABSENT = "absent"


ABSENT = Absent.ABSENT
Kind = Callable[["Node"], object]  # a field reader of a table: one per JSON type (see the factories below)


class Node:
    """One value of a parsed JSON document, where it sits (`path`) and which file it came from (`source`)."""

    __slots__ = ("path", "source", "value")

    def __init__(self, value: JSONValue | Absent, source: str, path: str = "") -> None:
        self.value, self.source, self.path = value, source, path

    @classmethod
    def of(cls, data: JSONObject | Node, source: str) -> Node:
        """`data` itself when it is a Node already (read inside a larger document), else its root node."""
        return data if isinstance(data, Node) else cls(data, source)

    # --- navigation ------------------------------------------------------------------------------

    def key(self, name: str) -> Node:
        """The child `name` of this object (its value is `ABSENT` when missing: see `present`)."""
        mapping = self.obj()
        return Node(mapping.get(name, ABSENT), self.source, f"{self.path}.{name}" if self.path else name)

    @property
    def present(self) -> bool:
        return self.value is not ABSENT

    @property
    def given(self) -> bool:
        """Present and not null: an optional block that is there to be read."""
        return self.value is not ABSENT and self.value is not None

    def items(self, *, min_length: int = 0) -> list[Node]:
        """The elements of an array, each with its path (`distance[3]`)."""
        value = self.array()
        if len(value) < min_length:
            self.fail(f"an array of at least {min_length} item{'s' if min_length != 1 else ''}")
        return [Node(v, self.source, f"{self.path}[{i}]") for i, v in enumerate(value)]

    def entries(self, *, min_length: int = 0) -> list[tuple[str, Node]]:
        """The members of an object in file order, each with its path."""
        mapping = self.obj()
        if len(mapping) < min_length:
            self.fail("a non-empty object" if min_length == 1 else f"an object of at least {min_length} members")
        return [(k, self.key(k)) for k in mapping]

    # --- typed values ----------------------------------------------------------------------------

    def array(self) -> list[JSONValue]:
        """An array as parsed: its elements' types are for the caller to check (or `items` to walk)."""
        value = self._required()
        if not isinstance(value, list):
            self.fail("an array")
        return value

    def obj(self) -> JSONObject:
        value = self._required()
        if not isinstance(value, dict):
            self.fail("an object")
        return value

    @overload
    def text(
        self, *, optional: Literal[False] = False, default: str | Absent = ABSENT, nonempty: bool = False
    ) -> str: ...
    @overload
    def text(self, *, optional: bool, default: str | Absent = ABSENT, nonempty: bool = False) -> str | None: ...
    def text(self, *, optional: bool = False, default: str | Absent = ABSENT, nonempty: bool = False) -> str | None:
        settled, fallback = self._fallback(optional, default)
        if settled:
            return fallback
        value = self.value
        if not isinstance(value, str) or (nonempty and not value):
            self.fail("a non-empty string" if nonempty else "a string")
        return value

    @overload
    def integer(
        self, *, optional: Literal[False] = False, default: int | Absent = ABSENT, minimum: int | None = None
    ) -> int: ...
    @overload
    def integer(self, *, optional: bool, default: int | Absent = ABSENT, minimum: int | None = None) -> int | None: ...
    def integer(
        self, *, optional: bool = False, default: int | Absent = ABSENT, minimum: int | None = None
    ) -> int | None:
        settled, fallback = self._fallback(optional, default)
        if settled:
            return fallback
        value = self.value
        if not isinstance(value, int) or isinstance(value, bool):
            self.fail("an integer" if minimum is None else f"an integer ≥ {minimum}")
        if minimum is not None and value < minimum:
            self.fail(f"an integer ≥ {minimum}")
        return value

    @overload
    def number(
        self,
        *,
        optional: Literal[False] = False,
        default: float | Absent = ABSENT,
        finite: bool = False,
        low: float | None = None,
        high: float | None = None,
    ) -> float: ...
    @overload
    def number(
        self,
        *,
        optional: bool,
        default: float | Absent = ABSENT,
        finite: bool = False,
        low: float | None = None,
        high: float | None = None,
    ) -> float | None: ...
    def number(
        self,
        *,
        optional: bool = False,
        default: float | Absent = ABSENT,
        finite: bool = False,
        low: float | None = None,
        high: float | None = None,
    ) -> float | None:
        """A JSON number as float; NaN and ±inf (how layerprobe records a failed measurement) unless `finite`.

        `low`/`high` bound every value but NaN (also ±inf: a distance of -Infinity is impossible, not a
        failed measurement), so a recorded NaN stays readable.
        """
        settled, fallback = self._fallback(optional, default)
        if settled:
            return fallback
        value = self.value
        if not isinstance(value, int | float) or isinstance(value, bool):
            self.fail("a number")
        number = float(value)
        if finite and not math.isfinite(number):
            self.fail("a finite number")
        if not math.isnan(number) and ((low is not None and number < low) or (high is not None and number > high)):
            self.fail(_range_text(low, high, nan=not finite))
        return number

    @overload
    def flag(self, *, optional: Literal[False] = False, default: bool | Absent = ABSENT) -> bool: ...
    @overload
    def flag(self, *, optional: bool, default: bool | Absent = ABSENT) -> bool | None: ...
    def flag(self, *, optional: bool = False, default: bool | Absent = ABSENT) -> bool | None:
        settled, fallback = self._fallback(optional, default)
        if settled:
            return fallback
        value = self.value
        if not isinstance(value, bool):
            self.fail("true or false")
        return value

    def text_map(self) -> dict[str, str]:
        """An object whose values are all strings (e.g. `run.versions`)."""
        return {k: v.text() for k, v in self.entries()}

    # --- failure ---------------------------------------------------------------------------------

    def fail(self, expected: str, got: str | None = None) -> NoReturn:
        """Raise the one-line error: `<file>: <path> must be <expected>, got <value>`."""
        where = self.path or "the top level"
        shown = got if got is not None else ("missing" if not self.present else f"got {describe(self.value)}")
        raise ResultError(
            f"{self.source}: {where} must be {expected}, {shown}",
            hint="The file is not one layerprobe wrote, or was edited or truncated: re-run the command that made it.",
        )

    def _required(self) -> JSONValue:
        value = self.value
        if isinstance(value, Absent):
            self.fail("present")
        return value

    def _fallback(self, optional: bool, default: T | Absent) -> tuple[bool, T | None]:
        """(True, what to return) when the value is settled without a type check, else (False, None).

        Settled: absent with a default (the default), absent or null when `optional` (None). Absent
        otherwise is an error.
        """
        if not self.present:
            if not isinstance(default, Absent):
                return True, default
            if optional:
                return True, None
            self.fail("present")
        if self.value is None and optional:
            return True, None
        return False, None


def describe(value: JSONValue | Absent) -> str:
    """A short, safe picture of a bad value for an error message (never the whole of a huge one)."""
    if isinstance(value, dict):
        return f"an object of {len(value)} member{'s' if len(value) != 1 else ''}"
    if isinstance(value, list):
        return f"an array of {len(value)} item{'s' if len(value) != 1 else ''}"
    text = json.dumps(value, allow_nan=True)
    return text if len(text) <= 60 else text[:57] + "…"


def read_fields(node: Node, table: dict[str, Kind]) -> dict[str, Any]:
    """Read every field of a flat record by its kind in `table` (field name → `Node` reader).

    The values are as mixed as the table's readers (str, int, None…), ready for `cls(**fields)`: `Any`
    because their types are the table's, which a type checker cannot follow into a dict.
    """
    node.obj()
    return {name: kind(node.key(name)) for name, kind in table.items()}


def checked_record(node: Node, table: dict[str, Kind]) -> JSONObject:
    """An open record (`data`, `settings`): every member kept in file order, the known ones checked."""
    record = dict(node.obj())
    checked = read_fields(node, table)
    record.update({name: value for name, value in checked.items() if name in record})
    return record


# Field kinds for the tables of the result modules: one reader per JSON type, with its optionality.
def text(optional: bool = False, default: str | Absent = ABSENT) -> Kind:
    """A string field (None when optional and null or absent)."""
    return lambda node: node.text(optional=optional, default=default)


def integer(optional: bool = False, default: int | Absent = ABSENT, minimum: int | None = None) -> Kind:
    """An integer field (never a bool or a float)."""
    return lambda node: node.integer(optional=optional, default=default, minimum=minimum)


def number(optional: bool = False, default: float | Absent = ABSENT, finite: bool = False) -> Kind:
    """A number field: NaN/inf allowed unless `finite`."""
    return lambda node: node.number(optional=optional, default=default, finite=finite)


def flag(optional: bool = False, default: bool | Absent = ABSENT) -> Kind:
    """A boolean field."""
    return lambda node: node.flag(optional=optional, default=default)


def text_or_integer(optional: bool = False) -> Kind:
    """`batch_size`: an integer, or a word such as "auto"."""

    def read(node: Node) -> str | int | None:
        if isinstance(node.value, str):
            return node.value
        return node.integer(optional=optional)

    return read


def string_map(optional: bool = False) -> Kind:
    """An object of strings (empty when optional and absent)."""

    def read(node: Node) -> dict[str, str]:
        if optional and not node.given:
            return {}
        return node.text_map()

    return read


def text_list(optional: bool = False) -> Kind:
    """An array of strings (e.g. `run.command`): None when optional and absent or null."""

    def read(node: Node) -> list[str] | None:
        if optional and (not node.given or node.value is None):
            return None
        return [item.text() for item in node.items()]

    return read


def integer_list(optional: bool = False) -> Kind:
    """An array of integers (e.g. `model.skipped_blocks`): None when optional and absent or null."""

    def read(node: Node) -> list[int] | None:
        if optional and (not node.given or node.value is None):
            return None
        return [item.integer() for item in node.items()]

    return read


def any_object(optional: bool = False) -> Kind:
    """An object whose members are read by their own code (e.g. prune-drop's `agreement`): only its type here."""

    def read(node: Node) -> JSONObject | None:
        if optional and not node.given:
            return None
        return node.obj()

    return read


def interval(
    node: Node, low: float | None = None, high: float | None = None, estimate: float | None = None
) -> list[float] | None:
    """A `[low, high]` pair of numbers (a confidence interval), or None for a JSON null.

    NaN bounds are allowed (undefined); a lower bound above the upper one is refused, and so is a bound
    outside `[low, high]` where the quantity has a range (a correlation in [-1, 1]), and an interval that
    does not hold its `estimate` (every interval layerprobe writes holds its own; a NaN estimate or bound
    is not checked). The check allows rounding: 1e-6 of the estimate's size.
    """
    if not node.given:
        return None
    bounds = [item.number(low=low, high=high) for item in node.items()]
    if len(bounds) != 2:
        node.fail("null or an array [low, high]", f"got {len(bounds)} items")
    if bounds[0] > bounds[1]:
        node.fail("an interval [low, high] with low ≤ high", f"got [{bounds[0]:g}, {bounds[1]:g}]")
    if estimate is not None and not math.isnan(estimate):
        slack = 1e-6 * max(1.0, abs(estimate))
        if bounds[0] - slack > estimate or estimate > bounds[1] + slack:
            node.fail(f"an interval holding its estimate {estimate:g}", f"got [{bounds[0]:g}, {bounds[1]:g}]")
    return bounds


# Scores that cannot be negative: a mean negative log-likelihood, a KL divergence, perplexities, bits per byte.
NON_NEGATIVE_METRICS = frozenset({"nll", "kl", "perplexity", "word_perplexity", "byte_perplexity", "bits_per_byte"})


def score_range(metric: str | None) -> tuple[float | None, float | None]:
    """The range of a metric's score: [0, 1] for a share (acc, exact_match, top-1 agreement…), ≥ 0 for a loss."""
    name = None if metric is None else metric.split(",")[0]
    if name in PROPORTION_METRICS or name == "top1_agreement":
        return 0.0, 1.0
    return (0.0, None) if name in NON_NEGATIVE_METRICS else (None, None)


def _range_text(low: float | None, high: float | None, nan: bool) -> str:
    """`a number in [0, 1]`, `a number ≥ 0`…, with `(or NaN)` where a failed measurement is allowed."""
    if low is not None and high is not None:
        text = f"a number in [{low:g}, {high:g}]"
    else:
        text = f"a number ≥ {low:g}" if low is not None else f"a number ≤ {high:g}"
    return text + (" (or NaN)" if nan else "")


def declared_kind(item: Declared) -> Kind:
    """How a result reads one recorded setting, from its declaration on the spec (core/option_spec.py).

    The JSON type follows the field's type; a result written before the setting existed lacks it:
    absent reads as the spec's default where the declaration says so (`older_default`), else as absent.
    """
    options = set(typing.get_args(item.type)) or {item.type}
    default = item.default if item.option.older_default else ABSENT
    optional = default is ABSENT
    minimum = item.option.minimum
    if options >= {int, str}:
        return text_or_integer(optional=True)
    if bool in options:
        return flag(optional=optional, default=default)
    if int in options:
        low = None if minimum is None else int(minimum)
        return lambda node: node.integer(optional=optional, default=default, minimum=low)
    if float in options:
        return lambda node: node.number(optional=optional, default=default, finite=True, low=minimum)
    return text(optional=optional, default=default)
