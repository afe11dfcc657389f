"""The shape of the package, checked from its source: what import-linter's contracts do not say.

`lint-imports` (contracts in pyproject.toml, run by .ci/run) keeps the floors, the independent siblings,
the torch-free rooms and the absence of cycles. These tests keep the habits that make the rooms
readable: imports across rooms go through a room's face (its `__init__`), nobody imports another
module's private name, function-level imports exist only where they defer a heavy dependency, modules
stay small, and the room graph stays shallow.
"""

from __future__ import annotations

import ast
import functools
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "layerprobe"
MAX_LINES = 400
MAX_LEVELS = 8
HEAVY = ("torch", "transformers", "lm_eval", "datasets", "matplotlib", "accelerate")


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def room(name: str) -> str | None:
    """`layerprobe.model.load` → "model"; top-level modules (`layerprobe.__main__`) have no room."""
    parts = name.split(".")
    return parts[1] if len(parts) > 1 and f"layerprobe.{parts[1]}" in MODULES and len(parts) >= 2 else None


@functools.cache
def parsed(name: str) -> ast.Module:
    return ast.parse(MODULES[name].read_text(encoding="utf-8"))


@functools.cache
def layerprobe_imports(name: str) -> tuple[tuple[ast.stmt, str, list[str], bool], ...]:
    """(node, target module, imported names, inside a function) for every import of a layerprobe module."""
    found: list[tuple[ast.stmt, str, list[str], bool]] = []

    def visit(node: ast.AST, inside: bool) -> None:
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("layerprobe"):
            found.append((node, node.module, [a.name for a in node.names], inside))
        elif isinstance(node, ast.Import):
            found.extend((node, a.name, [], inside) for a in node.names if a.name.startswith("layerprobe"))
        inside = inside or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        for child in ast.iter_child_nodes(node):
            visit(child, inside)

    visit(parsed(name), False)
    return tuple(found)


@pytest.mark.slow  # over 3 s on 2 cores: the default tier stays under 3 minutes
def test_function_level_imports_only_defer_heavy_work_from_the_command_line():
    """A command module imports its workflow when the command runs, so `--help` never loads torch.

    Anywhere else a function-level import of our own module would be hiding a cycle or an upward import.
    """
    offenders, cli_targets = [], set()
    for name in MODULES:
        for node, target, _names, inside in layerprobe_imports(name):
            if not inside:
                continue
            if name == "layerprobe":  # the public API's lazy attributes (PEP 562)
                continue
            if room(name) == "cli":
                cli_targets.add(target)
                continue
            offenders.append(f"{name}:{node.lineno} imports {target} inside a function")
    assert offenders == []
    # Each deferred target must really be heavy: importing it loads torch, matplotlib or lm-eval.
    probe = "import importlib, sys\nfor t in sys.argv[1:]:\n    importlib.import_module(t)\n"
    light = []
    for target in sorted(cli_targets):
        code = probe + f"print(any(m in sys.modules for m in {HEAVY!r}))"
        out = subprocess.run([sys.executable, "-c", code, target], capture_output=True, text=True, check=True)
        if out.stdout.strip() != "True":
            light.append(target)
    assert light == [], "import these at the top of the command module: they are cheap"


def test_no_module_imports_another_modules_private_name():
    found = [
        f"{name} imports {target}.{imported}"
        for name in MODULES
        for _node, target, names, _inside in layerprobe_imports(name)
        for imported in names
        if imported.startswith("_") and target != name
    ]
    assert found == []


def test_imports_across_rooms_go_through_the_rooms_face():
    """`from layerprobe.model import load_model`, never `from layerprobe.model.load import load_model`."""
    found = []
    for name in MODULES:
        if name == "layerprobe":
            continue
        for node, target, _names, inside in layerprobe_imports(name):
            if inside and room(name) == "cli":
                continue  # deferred: the face would import every module of the room
            if target.count(".") >= 2 and room(target) != room(name):
                found.append(f"{name}:{node.lineno} imports {target}")
    assert found == []


@pytest.mark.parametrize("name", sorted(MODULES))
def test_modules_stay_small(name):
    lines = len(MODULES[name].read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_LINES, f"{name} has {lines} lines: split it by idea"


def test_the_room_graph_is_shallow_and_acyclic():
    edges: dict[str, set[str]] = {}
    for name in MODULES:
        source = room(name) or name
        for _node, target, _names, _inside in layerprobe_imports(name):
            if target == "layerprobe" or name == "layerprobe":
                continue
            goal = room(target) or target
            if goal != source:
                edges.setdefault(source, set()).add(goal)

    @functools.cache
    def depth(node: str, trail: tuple[str, ...] = ()) -> int:
        assert node not in trail, f"cycle: {' → '.join((*trail, node))}"
        return 1 + max((depth(t, (*trail, node)) for t in edges.get(node, ())), default=0)

    levels = max(depth(r) for r in edges)
    assert levels <= MAX_LEVELS
    # 16 rooms and __main__: the API and integrations (issue 29) on their own floors above the read-only rooms,
    # heal (issue 28) beside prune.
    assert len({room(n) for n in MODULES if room(n)}) <= 17, "about a dozen rooms"


def test_the_command_line_starts_without_torch():
    code = f"import sys, layerprobe.cli.app\nprint(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r}))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
