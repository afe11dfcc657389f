"""docs/ci.md: the rules file and the workflow it shows must be what the code accepts."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from layerprobe.gate import load_rules

CI_DOC = Path(__file__).resolve().parents[2] / "docs" / "ci.md"


def fenced(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", CI_DOC.read_text(encoding="utf-8"), flags=re.S)


def test_the_documented_rules_file_loads_and_explains_every_key(tmp_path):
    (text,) = fenced("toml")
    (tmp_path / "gate.toml").write_text(text)
    rules = load_rules(tmp_path / "gate.toml")
    assert rules.metrics == {"arc_easy": "acc_norm"} and rules.se_factor == 2.0
    for key in (
        "lazy_threshold",
        "max_lazy_increase",
        "adjacent_tolerance",
        "max_drop",
        "se_factor",
        "metric",
        "metrics",
    ):
        assert re.search(rf"^#? ?\[?[\w.]*{key}\b", text, flags=re.M), key


def test_the_documented_workflow_is_valid_yaml_and_gates_with_compare():
    yaml = pytest.importorskip("yaml")
    workflow = next(yaml.safe_load(block) for block in fenced("yaml") if block.startswith("name:"))
    steps = workflow["jobs"]["layer-gate"]["steps"]
    run = "\n".join(step.get("run", "") for step in steps)
    assert run.index("pip install torch") < run.index("pip install ./layerprobe-src")  # from its repository
    source = next(step for step in steps if step.get("with", {}).get("path") == "layerprobe-src")
    assert source["uses"].startswith("actions/checkout") and source["with"]["repository"].endswith("/layerprobe")
    assert "layerprobe==" not in "\n".join(fenced("yaml"))  # not on PyPI
    assert "layerprobe angular" in run and "layerprobe prune-drop" in run
    assert "--format markdown" in run and '>> "$GITHUB_STEP_SUMMARY"' in run and "--junit" in run
    cache = next(step for step in steps if step.get("uses", "").startswith("actions/cache"))
    assert cache["with"]["path"] == "~/.cache/huggingface" and "MODEL_REVISION" in cache["with"]["key"]
    assert any("secrets.HF_TOKEN" in str(step.get("env", {})) for step in steps)
