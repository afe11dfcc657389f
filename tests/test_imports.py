"""Imports point one way: no cycles inside layerprobe, and lower floors never import upper ones.

Floors (docs/design.md): top cli, console; middle angular, prune, prune_state, report, gate/, depth*;
ground models, layers, trace, sublayers, placement*, corpus, evaluate/, results, specs, errors, progress,
provenance, demo. The graph is
read from the source (every `import`, also those inside functions and under TYPE_CHECKING), so a lazy
import cannot hide a cycle.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "layerprobe"
TOP = {"layerprobe.cli.app", "layerprobe.cli.console", "layerprobe.__main__"}
GROUND = (
    "layerprobe.evaluate",
    "layerprobe.results.kinds",
    "layerprobe.core.errors",
    "layerprobe.core.specs",
    "layerprobe.model.load",
    "layerprobe.model.trace",
    "layerprobe.model.sublayers",
    "layerprobe.model.placement",
    "layerprobe.model.skeleton",
)
UPPER = (
    "layerprobe.cli.app",
    "layerprobe.cli.console",
    "layerprobe.prune.drop",
    "layerprobe.prune.shards",
    "layerprobe.measure.angular",
    "layerprobe.gate",
    "layerprobe.measure.depth",
    "layerprobe.measure.spread",
    "layerprobe.measure.gradients",
    "layerprobe.plots.depth",
    "layerprobe.gate.depth_rules",
)


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def imports_of(name: str) -> set[str]:
    """The layerprobe modules `name` imports (a package import counts as its __init__)."""
    tree = ast.parse(MODULES[name].read_text(encoding="utf-8"))
    found = set()
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            targets = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        found.update(t for t in targets if t in MODULES and t != name)
    return found


GRAPH = {name: imports_of(name) for name in MODULES}


def within(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_every_module_imports(name):
    assert importlib.import_module(name).__name__ == name


def test_the_import_graph_has_no_cycle():
    state: dict[str, int] = {}  # 1 on the current path, 2 finished
    cycles = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(GRAPH[node]):
            if state.get(nxt) == 1:
                cycles.append(path[path.index(nxt) :] + [nxt])
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for start in sorted(GRAPH):
        if start not in state:
            visit(start, [start])
    # A package's __init__ re-exporting its submodules is not a cycle of ideas, but none exists today.
    assert cycles == []


def test_lower_floors_never_import_upper_ones():
    offending = {
        name: sorted(t for t in targets if within(t, UPPER)) for name, targets in GRAPH.items() if within(name, GROUND)
    }
    assert {k: v for k, v in offending.items() if v} == {}
    # evaluate/ knows nothing of prune-drop's orchestration (prune, prune_state) or of the gate.
    evaluate = {t for name, targets in GRAPH.items() if within(name, ("layerprobe.evaluate",)) for t in targets}
    assert not {
        t for t in evaluate if within(t, ("layerprobe.prune.drop", "layerprobe.prune.state", "layerprobe.gate"))
    }
    # Only the command line imports the command line's modules.
    assert {n for n, targets in GRAPH.items() if targets & TOP and n not in TOP} == set()


def test_the_graph_sees_known_edges():
    """The checks above mean something only if the parser finds imports at all (lazy ones included)."""
    assert "layerprobe.prune.drop" in GRAPH["layerprobe.cli.app"]  # imported inside the prune-drop command
    assert "layerprobe.evaluate.harness" in GRAPH["layerprobe.evaluate.shared"]
    assert "layerprobe.gate.verdict" in GRAPH["layerprobe.gate.render"]  # under TYPE_CHECKING
