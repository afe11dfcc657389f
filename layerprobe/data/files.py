r"""Local `.txt` and `.jsonl` corpora, read by layerprobe itself: streamed, checked early, errors with line numbers.

`datasets` would read these too, but a bad line surfaces from deep inside pyarrow as a traceback, and a
binary file named `.txt` is happily tokenized as garbage. Reading them here makes every such mistake one
`CorpusError` naming the file (and the line), raised as soon as the bad bytes are reached, before any
model work. The documents are the same as `datasets`' (`text` with `sample_by="paragraph"`: the file
split at blank lines "\n\n", empty paragraphs dropped, universal newlines; `json`: one object per line).
"""

from __future__ import annotations

import codecs
import json
from collections.abc import Iterator
from pathlib import Path

from layerprobe.core import CorpusError

_CHUNK_BYTES = 1 << 20
_BINARY_HINT = "Pass a UTF-8 text file (.txt: paragraphs separated by blank lines; .jsonl: one JSON object per line)."


def iter_text(path: Path) -> Iterator[str]:
    r"""A UTF-8 text file in decoded pieces of about 1 MB, newlines made "\n" (Python's universal newlines).

    NUL bytes (a binary file) or bytes that are not UTF-8 stop it at once with one `CorpusError` naming the
    file and the line, so a wrong file fails in the first megabyte, not after the model has loaded.
    """
    decoder = codecs.getincrementaldecoder("utf-8")(errors="strict")
    lines, offset, held = 1, 0, ""
    with open(path, "rb") as handle:
        while True:
            chunk = handle.read(_CHUNK_BYTES)
            if b"\0" in chunk:
                at = offset + chunk.index(b"\0")
                raise CorpusError(f"{path} is not a text file: it holds a NUL byte (byte {at:,}).", _BINARY_HINT)
            try:
                text = held + decoder.decode(chunk, final=not chunk)
            except UnicodeDecodeError as exc:
                line = lines + held.count("\n") + chunk[: exc.start].count(b"\n")
                raise CorpusError(
                    f"{path} is not UTF-8 text: undecodable bytes on line {line:,} (byte {offset + exc.start:,}).",
                    _BINARY_HINT,
                ) from None
            offset += len(chunk)
            held = ""
            if chunk and text.endswith("\r"):  # a CR LF may straddle two chunks: decide with the next one
                text, held = text[:-1], "\r"
            text = text.replace("\r\n", "\n").replace("\r", "\n")
            lines += text.count("\n")
            if text:
                yield text
            if not chunk:
                return


def iter_text_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, line without its newline) of a UTF-8 text file, streamed (see `iter_text`)."""
    number = 1
    for line in _split_stream(iter_text(path), "\n"):
        yield number, line
        number += 1


def iter_paragraphs(path: Path) -> Iterator[str]:
    r"""The paragraphs of a `.txt` corpus: the text split at "\n\n", empty ones dropped (as `datasets` does)."""
    return (paragraph for paragraph in _split_stream(iter_text(path), "\n\n") if paragraph)


def _split_stream(pieces: Iterator[str], separator: str) -> Iterator[str]:
    r"""`"".join(pieces).split(separator)` without joining: linear in the text, however long one part is.

    Unfinished text is kept as a list of pieces (joined once, when its part ends), so a 1 GB file without
    a separator costs one join, not a quadratic series of ever longer concatenations. `separator` is "\n"
    or "\n\n": a separator split over two pieces is found by the boundary check below.
    """
    pending: list[str] = []
    for text in pieces:
        if separator == "\n\n" and pending and pending[-1].endswith("\n") and text.startswith("\n"):
            pending[-1] = pending[-1][:-1]
            yield "".join(pending)
            pending, text = [], text[1:]
        parts = text.split(separator)
        if len(parts) > 1:
            yield "".join([*pending, parts[0]])
            yield from parts[1:-1]
            pending = []
        pending.append(parts[-1])
    if any(pending):
        yield "".join(pending)


def iter_jsonl_rows(path: Path) -> Iterator[dict[str, object]]:
    """The objects of a `.jsonl` corpus, one per non-blank line; a line that is not a JSON object is named."""
    for number, line in iter_text_lines(path):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except (json.JSONDecodeError, RecursionError) as exc:
            reason = exc.msg if isinstance(exc, json.JSONDecodeError) else "nested too deeply"
            raise CorpusError(
                f"{path}, line {number:,}: not valid JSON ({reason}).",
                hint='A .jsonl corpus holds one JSON object per line, e.g. {"text": "..."}.',
            ) from None
        if not isinstance(row, dict):
            raise CorpusError(
                f"{path}, line {number:,}: expected a JSON object, got {type(row).__name__}.",
                hint='A .jsonl corpus holds one JSON object per line, e.g. {"text": "..."}.',
            )
        yield row
