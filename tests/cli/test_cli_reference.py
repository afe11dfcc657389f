"""docs/cli.md is the reference of every command: each has a section, and it names every option the command takes."""

from __future__ import annotations

import re
from pathlib import Path

import typer.main

from layerprobe.cli.app import app

CLI_MD = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def command_sections(text: str) -> dict[str, str]:
    """`## \\`layerprobe NAME\\`` section → its text, up to the next `## ` heading."""
    sections: dict[str, str] = {}
    for part in re.split(r"(?m)^## ", text):
        found = re.match(r"`layerprobe ([\w-]+)`", part)
        if found:
            sections[found.group(1)] = part
    return sections


def named(option: str, text: str) -> bool:
    """Whether `--option` appears in `text` as a whole option (not as the start of a longer one)."""
    return re.search(re.escape(option) + r"(?![\w-])", text) is not None


def test_every_command_has_a_section_that_names_each_of_its_options():
    sections = command_sections(CLI_MD.read_text(encoding="utf-8"))
    commands = typer.main.get_command(app).commands  # a click Group: one command per subcommand
    missing = []
    for name, command in commands.items():
        section = sections.get(name)
        if section is None:
            missing.append(f"{name}: no section")
            continue
        for param in command.params:
            options = [o for o in (*param.opts, *param.secondary_opts) if o.startswith("--")]
            if options and not any(named(o, section) for o in options):
                missing.append(f"{name}: {options[0]}")
    assert not missing, missing


def test_the_check_sees_a_missing_option():
    sections = command_sections("## `layerprobe x`\n| `--tokens` | … |\n## `layerprobe y`\n")
    assert named("--tokens", sections["x"]) and not named("--tok", sections["x"])
    assert not named("--tokens", sections["y"])
