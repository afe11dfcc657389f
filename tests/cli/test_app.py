"""The app: --version, help that names the extras, and help that never imports the heavy libraries."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from command_line import flat_help
from typer.testing import CliRunner

import layerprobe
from layerprobe.cli.app import app

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


def test_version_prints_the_package_version():
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output == f"layerprobe {layerprobe.__version__}\n"
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert layerprobe.__version__ == project["version"]
    assert "--version" in flat_help()


@pytest.mark.parametrize("command", ["angular", "depth", "prune-drop", "prune-curve"])
def test_the_quant_extra_is_named_in_the_help(command):
    text = flat_help(command)
    assert text.count("bitsandbytes (extra [quant]).") == 2 and "(extra )" not in text


def test_help_never_imports_the_heavy_libraries():
    heavy = ("torch", "transformers", "lm_eval", "datasets", "matplotlib", "accelerate")
    code = (
        "import sys\nfrom layerprobe.cli.app import app\n"
        "for args in ([], ['prune-drop'], ['prune-curve'], ['angular'], ['layers'], ['compare']):\n"
        "    try:\n        app([*args, '--help'])\n    except SystemExit:\n        pass\n"
        f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({heavy!r})))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip().splitlines()[-1] == "[]"
