"""docs/cli.md is the reference of every command, generated from the app: it must be what the app says now."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import typer.main

from layerprobe.cli.app import app

DOCS = Path(__file__).resolve().parents[2] / "docs"


def generator():
    spec = importlib.util.spec_from_file_location("make_cli_reference", DOCS / "make_cli_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_docs_cli_md_is_the_generated_reference():
    """Stale when an option, help text, default or panel changed: run `python docs/make_cli_reference.py`."""
    assert (DOCS / "cli.md").read_text(encoding="utf-8") == generator().reference()


def test_the_reference_names_every_option_of_every_command_with_its_help():
    text = generator().reference()
    sections = {m.group(1): m.group(2) for m in re.finditer(r"(?ms)^## `layerprobe ([\w-]+)`(.*?)(?=^## |\Z)", text)}
    for name, command in typer.main.get_command(app).commands.items():
        section = sections[name]
        for param in command.params:
            if param.name == "help":
                continue
            shown = param.opts[0] if param.param_type_name == "option" else f"`{param.name.upper()}`"
            assert shown in section, (name, shown)
            if param.help:
                assert " ".join(param.help.split())[:40].replace("|", "\\|") in section, (name, param.name)


def test_help_is_grouped_in_panels_common_groups_in_the_same_panel_everywhere():
    commands = typer.main.get_command(app).commands
    panels = {p.name: p.rich_help_panel for p in commands["prune-drop"].params if p.name != "help"}
    assert panels["dtype"] == panels["model_args"] == "Model loading"
    assert panels["task"] == panels["limit"] == "Tasks and evaluation"
    assert panels["out"] == panels["quiet"] == "Output"
    for command in ("angular", "depth", "prune-curve"):
        params = {p.name: p.rich_help_panel for p in commands[command].params}
        assert params["dtype"] == "Model loading" and params["out"] == "Output", command
