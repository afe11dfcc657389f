"""`layerprobe.__all__` is the API: every public name has a docstring and an entry in docs/api.md.

Also: importing `layerprobe` stays light (the names are imported on first use), and each name resolves.
"""

from __future__ import annotations

import inspect
import re
import subprocess
import sys
from pathlib import Path

import pytest

import layerprobe

API_DOC = Path(__file__).resolve().parents[1] / "docs" / "api.md"
PUBLIC = [name for name in layerprobe.__all__ if not name.startswith("__")]


def documented_names() -> set[str]:
    """The names of docs/api.md's entries: headings such as ### `lp.angular`."""
    return set(re.findall(r"^#{2,4} `(?:lp\.)?([A-Za-z_]+)`", API_DOC.read_text(encoding="utf-8"), re.MULTILINE))


@pytest.mark.parametrize("name", PUBLIC)
def test_every_public_name_has_a_docstring_and_an_api_entry(name):
    value = getattr(layerprobe, name)
    assert inspect.getdoc(value), f"layerprobe.{name} has no docstring"
    assert name in documented_names(), f"docs/api.md has no entry (### `lp.{name}`) for layerprobe.{name}"


def test_every_api_entry_is_a_public_name():
    assert documented_names() <= set(PUBLIC)


def test_importing_layerprobe_imports_no_torch():
    code = "import sys, layerprobe; print('torch' in sys.modules, 'transformers' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError):
        layerprobe.angularr  # noqa: B018
