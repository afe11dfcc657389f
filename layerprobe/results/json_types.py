"""Names for JSON values, so result code says "a parsed JSON value" instead of `Any`.

`JSONValue` is what `json.loads` can return; a reader narrows it with `isinstance` (validate.py's `Node`
does, once, for every result file). `Record` is an open record written out as a JSON object (a result's
`data` or `settings`, a run's fingerprint): members of any JSON-ready type, whose readers check what
they use. It is a `Mapping` (read-only, covariant) so that callers may hand in any dict of JSON-ready
values without spelling its type out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeAlias

JSONValue: TypeAlias = str | int | float | bool | None | list["JSONValue"] | dict[str, "JSONValue"]
JSONObject: TypeAlias = dict[str, JSONValue]
Record: TypeAlias = Mapping[str, object]
