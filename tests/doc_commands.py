"""The `layerprobe …` commands the README, docs/examples.md and docs/ci.md show, read out of their code blocks.

A command is found in a ```bash/```sh/```yaml block on any line (after `$ `, `||`, `-m`, a quote …), and in
a ```text block only on a line that starts with the prompt `$ ` (the rest of a text block is output).
Lines continued with a trailing backslash are joined; the command ends where the shell would end it (a
pipe, a redirection, `;`, `&&`, a comment, or the quote it sits in). Other blocks (json, markdown, toml,
python) hold no commands.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ("README.md", "docs/examples.md", "docs/ci.md")
COMMAND_BLOCKS = ("bash", "sh", "shell", "yaml")
SHELL_OPERATORS = {";", "|", "||", "&", "&&", ">", ">>", "<", "(", ")"}
# What may stand before `layerprobe` for it to be a command (a yaml key such as `check_name:` may not).
STARTS = ("", "||", "&&", ";", "|", "-m", "then", "do")
FENCE = re.compile(r"^(\s*)```(\S*)\s*$")


@dataclass(frozen=True)
class Shown:
    """One command as the docs show it: the file, the line it starts on, its words after `layerprobe`."""

    doc: str
    line: int
    words: tuple[str, ...]

    @property
    def text(self) -> str:
        """The command as one line, for messages and for the mapping's keys."""
        return "layerprobe " + " ".join(self.words)


def code_blocks(text: str) -> list[tuple[str, int, list[str]]]:
    """Each fenced block: (language, 1-based number of its first line, its lines)."""
    blocks, language, start, lines = [], None, 0, []
    for number, line in enumerate(text.splitlines(), 1):
        fence = FENCE.match(line)
        if fence and language is None:
            language, start, lines = fence.group(2) or "", number + 1, []
        elif fence and language is not None and not fence.group(2):
            blocks.append((language, start, lines))
            language = None
        elif language is not None:
            lines.append(line)
    return blocks


def logical_lines(lines: list[str], start: int) -> list[tuple[int, str]]:
    """Lines with their backslash continuations joined, each with the number of its first line."""
    joined: list[tuple[int, str]] = []
    pending: tuple[int, str] | None = None
    for offset, line in enumerate(lines):
        if pending is None:
            pending = (start + offset, "")
        text = pending[1] + line.strip() if not pending[1] else pending[1] + " " + line.strip()
        if text.endswith("\\"):
            pending = (pending[0], text[:-1].rstrip())
            continue
        joined.append((pending[0], text))
        pending = None
    if pending is not None:
        joined.append(pending)
    return joined


def command_words(rest: str, quote: str | None) -> tuple[str, ...]:
    """The words of a command that starts at `rest`, up to where the shell ends it."""
    if quote:
        rest = rest.split(quote, 1)[0]
    # `<`/`>` are not split off words: the docs' placeholders look like `<minilm>`; a redirection stands alone.
    lexer = shlex.shlex(rest, posix=True, punctuation_chars=";&|()")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    words = []
    for word in lexer:
        if word in SHELL_OPERATORS:
            break
        words.append(word)
    return tuple(words)


def shown_commands(commands: set[str], docs: tuple[str, ...] = DOCS, root: Path = ROOT) -> list[Shown]:
    """Every `layerprobe <command> …` in the docs' code blocks, in the order a reader meets them."""
    found = []
    pattern = re.compile(r"(^|[\s'\"(|&;])layerprobe\s+(" + "|".join(map(re.escape, commands)) + r")(?=\s|$|['\"])")
    for doc in docs:
        for language, start, lines in code_blocks((root / doc).read_text(encoding="utf-8")):
            if language not in COMMAND_BLOCKS and language != "text":
                continue
            for number, line in logical_lines(lines, start):
                if language == "text":
                    if not line.startswith("$ "):
                        continue
                    line = line[2:]
                for match in pattern.finditer(line):
                    before = match.group(1)
                    prefix = line[: match.start(1)].split()
                    if before not in ("'", '"') and (prefix[-1] if prefix else "") not in STARTS:
                        continue
                    quote = before if before in ("'", '"') else None
                    rest = line[match.end(1) + len("layerprobe") :]
                    found.append(Shown(doc, number, command_words(rest, quote)))
    return found
