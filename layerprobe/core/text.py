r"""A user's string made safe for where it is shown: a terminal, a markdown page, a file encoded as UTF-8.

Names come from places nobody checks: a model id or task name in a hand-edited JSON file may hold a lone
surrogate (`"\udcff"` is valid JSON), a run directory may be named with a byte that is not UTF-8 (Python
reads it as a lone surrogate), and any of them may hold a carriage return, a bell or an escape sequence.
Nothing here refuses a name: each is shown escaped, the way Python's `ascii()` would write the odd
characters (`\x07`, `\x0d`, `\udcff`), so the reader sees which name it was and the writer never fails.
"""

from __future__ import annotations

import re

# C0 controls but newline and tab, DEL, and the C1 controls (U+0080-U+009F: 8-bit CSI and friends).
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_SURROGATES = re.compile(r"[\ud800-\udfff]")
# Also newline and tab: nothing inside one markdown table cell or heading may end the line.
_LINE_BREAKING = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def _escaped(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def without_surrogates(text: str) -> str:
    r"""`text` with each lone surrogate written as `\udcff`: encodable as UTF-8, the escape still visible."""
    return _SURROGATES.sub(_escaped, text)


def terminal_text(text: str) -> str:
    r"""`text` fit for a terminal: control characters (but newline and tab) shown as `\x1b`, `\x0d`…; no surrogate."""
    return _CONTROLS.sub(_escaped, without_surrogates(text))


def markdown_text(text: str) -> str:
    r"""`text` safe inside one markdown table cell or heading, as GitHub renders a job summary.

    Backslashes and pipes are escaped (a pipe would end the cell); every line break, carriage return and
    other control character is shown escaped (a CR or newline would end the row or the heading); `&`, `<`
    and `>` become entities, so raw HTML in a name (`<img src=…>`) is shown as text, never rendered.
    """
    text = str(text).replace("\\", "\\\\")
    text = _LINE_BREAKING.sub(_escaped, without_surrogates(text))
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return text.replace("|", "\\|")
