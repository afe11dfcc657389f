"""Where lm-eval tasks come from: task YAML files, an include path, and the task index that knows every name.

lm-eval reads its tasks from YAML files: its own ~15k (indexing them takes seconds) and those of an
`--include-path`. Three things it leaves to the caller are settled here, before any task is built:
- A task given as a YAML path, or a YAML under the include path, that cannot be read is named with
  its line and column; lm-eval skips an unreadable YAML silently and then calls its task unknown.
- When every name asked for is found under the include path, lm-eval's own index is never built.
- Relative `data_files` / `data_dir` in a local task YAML are resolved against the folder of that YAML
  (lm-eval hands them to `datasets.load_dataset` untouched, which resolves them against the current
  working directory, so a task folder would only work when run from one place).
- A local task YAML may name Python functions (`!function utils.process_docs`), which lm-eval imports from
  a `.py` file beside the YAML (`utils.py`; `pkg.utils.fn` from `pkg/utils.py`), i.e. runs.
  `local_task_code` names those files before the run, and `check_task_code` refuses to run them
  without `--trust-task-code` (a consent of its own: trusting a model's code is not trusting a task folder's).
"""

from __future__ import annotations

import dataclasses
import functools
import glob
from collections.abc import Sequence
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from layerprobe.core import PruneSpec, TaskError

if TYPE_CHECKING:
    from lm_eval.tasks import TaskManager

YAML_SUFFIXES = (".yaml", ".yml")


class IndexEntry(Protocol):
    """One name in lm-eval's task index (`lm_eval.tasks._index.Entry`): a task, a group or a tag."""

    kind: Enum  # TASK, PY_TASK, GROUP, TAG
    tags: set[str]  # for a tag: the tasks it names
    cfg: dict[str, Any] | None  # the YAML's settings (a group's `task` list), as lm-eval parsed them


# ------------------------------------------------------------------------------------------- task YAMLs
def yaml_task_name(path: Path) -> str | None:
    """The task (or group) name a task YAML defines; None when it names neither (e.g. it is unreadable)."""
    data = _yaml_mapping(path)
    for key in ("task", "group"):  # a group YAML's `task` is the list of its members
        value = data.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None


def by_task_name(names: Sequence[str]) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    """Key every task by its task name: a YAML path becomes the name its YAML defines.

    A task is then one key in every output (JSON, samples, plots, compare, the gate) whether it was given
    by name with `--include-path` or by the path of its YAML, and two YAML files whose paths would flatten
    to one file name cannot write over each other's outputs.

    Returns:
        The names, and (name, YAML path) for each task given as a path. A YAML naming no task keeps its path.

    Raises:
        TaskError: Two of `names` stand for the same task.
    """
    keys: dict[str, str] = {}  # task name → what the user gave
    files = []
    for given in names:
        defined = yaml_task_name(Path(given).expanduser()) if is_yaml_file(given) else None
        name = defined or given
        if name in keys:
            raise TaskError(f"task {name} is given twice (as {keys[name]} and as {given})", hint="give each task once")
        keys[name] = given
        if defined is not None:
            files.append((defined, given))
    return tuple(keys), tuple(files)


def keyed_by_task_name(spec: PruneSpec) -> PruneSpec:
    """`spec` with its tasks keyed by task name (`by_task_name`), the YAML paths kept in `task_files`."""
    if spec.task_files:
        return spec
    names, files = by_task_name(spec.tasks)
    return spec if not files else dataclasses.replace(spec, tasks=names, task_files=files)


def is_yaml_file(name: str) -> bool:
    """Whether a task name is the path of an existing task YAML file."""
    return name.endswith(YAML_SUFFIXES) and Path(name).expanduser().is_file()


def yaml_problem(path: Path) -> str | None:
    """Why a task YAML cannot be used (unparsable, or not a mapping), or None. `!function` tags are allowed."""
    import yaml

    class _Loader(yaml.SafeLoader):
        pass

    _Loader.add_multi_constructor("!", lambda loader, suffix, node: None)  # lm-eval's !function and friends
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=_Loader)  # noqa: S506 (a SafeLoader subclass)
    except (OSError, UnicodeDecodeError) as exc:
        return f"{path}: {exc}"
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        return f"{path}{where}: {problem}"
    if not isinstance(data, dict):
        return f"{path}: holds {type(data).__name__}, not a mapping of task settings"
    return None


def check_task_yaml(path: Path, name: str) -> None:
    """A task given as a YAML path must exist and parse; say what is wrong instead of "unknown task"."""
    if not path.is_file():
        raise TaskError(f"task YAML {name} does not exist", hint="check the path")
    problem = yaml_problem(path)
    if problem is not None:
        raise TaskError(f"task YAML cannot be read: {problem}", hint="fix the YAML syntax (lm-eval task format)")


def unreadable_yamls(include_path: str | Path | None) -> list[str]:
    """The unreadable YAMLs under --include-path, which lm-eval's index silently leaves out."""
    if include_path is None:
        return []
    found = []
    for path in sorted(Path(include_path).rglob("*.y*ml")):
        problem = yaml_problem(path)
        if problem is not None:
            found.append(problem)
    return found


def _yaml_mapping(path: Path, functions: list[str] | None = None) -> dict[str, Any]:
    """A task YAML's top-level mapping ({} if unreadable); its `!function` names appended to `functions`."""
    import yaml

    class _Loader(yaml.SafeLoader):
        pass

    def tag(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> None:
        if suffix == "function" and functions is not None and isinstance(node, yaml.ScalarNode):
            functions.append(str(loader.construct_scalar(node)))

    _Loader.add_multi_constructor("!", tag)
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=_Loader)  # noqa: S506 (a SafeLoader subclass)
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return {}
    return data if isinstance(data, dict) else {}


def _python_files(path: Path, seen: set[Path]) -> list[Path]:
    """The `.py` files the `!function` tags of a task YAML (and of the YAMLs it includes) import."""
    path = path.resolve()
    if path in seen:
        return []
    seen.add(path)
    functions: list[str] = []
    data = _yaml_mapping(path, functions)
    # lm-eval imports `a.b.fn` from a/b.py beside the YAML when it exists, else the installed module a.b.
    beside = [path.parent / f"{name.rpartition('.')[0].replace('.', '/')}.py" for name in functions if "." in name]
    found = [file for file in beside if file.is_file()]
    included = data.get("include")
    if isinstance(included, str):
        found += _python_files(path.parent / included, seen)
    return found


def _local_names(include_path: Path) -> dict[str, list[Path]]:
    """Task, group and tag names defined by the YAMLs under `include_path` → the YAML files naming them."""
    names: dict[str, list[Path]] = {}
    for path in sorted(include_path.rglob("*.y*ml")):
        data = _yaml_mapping(path)
        tag = data.get("tag")
        tags: list[object] = tag if isinstance(tag, list) else [tag]
        for name in [data.get("task"), data.get("group"), *tags]:
            if isinstance(name, str):
                names.setdefault(name, []).append(path)
    return names


def _members(data: dict[str, Any]) -> list[str]:
    """The task and group names a group YAML's `task` list refers to."""
    items = data.get("task")
    named = [
        item if isinstance(item, str) else item.get("group") or item.get("task") if isinstance(item, dict) else None
        for item in (items if isinstance(items, list) else [])
    ]
    return [name for name in named if isinstance(name, str)]


def local_task_code(names: list[str], include_path: str | Path | None) -> list[Path]:
    """The Python files that the local task YAMLs of `names` run (lm-eval's `!function`), in order, each once.

    Local means a task given as a YAML path, or found under `--include-path` (with the members of its
    groups and the YAMLs they include). Only the YAML text is read: nothing is imported here.
    """
    yamls = [Path(name).expanduser() for name in names if is_yaml_file(name)]
    local = _local_names(Path(include_path).expanduser()) if include_path is not None else {}
    pending, visited = [name for name in names if name in local], set()
    while pending:
        name = pending.pop()
        if name in visited:
            continue
        visited.add(name)
        for path in local[name]:
            yamls.append(path)
            pending += [member for member in _members(_yaml_mapping(path)) if member in local]
    seen: set[Path] = set()
    files = [file for path in yamls for file in _python_files(path, seen)]
    return list(dict.fromkeys(file.resolve() for file in files))


def check_task_code(names: list[str], include_path: str | Path | None, trusted: bool) -> list[Path]:
    """The Python files the local tasks of `names` would run, refused unless `trusted` (`--trust-task-code`).

    Called before lm-eval sees a task: lm-eval imports a `!function`'s module while it loads the YAML.

    Raises:
        TaskError: a local task names Python code and the run was not told to trust it.
    """
    files = local_task_code(names, include_path)
    if files and not trusted:
        raise TaskError(
            f"the local task YAMLs run Python code (lm-eval's !function): {', '.join(map(str, files))}; "
            "layerprobe runs it only when told to",
            hint="read those files, then pass --trust-task-code to run them",
        )
    return files


# ------------------------------------------------------------------------------------------ task index
def task_manager(names: list[str], include_path: str | Path | None) -> TaskManager:
    """A TaskManager that knows every name: the include path alone if it suffices, else lm-eval's too."""
    from lm_eval.tasks import TaskManager

    if include_path is not None:
        local = TaskManager(include_path=str(include_path), include_defaults=False)
        if all(_self_contained(name, local.task_index, frozenset()) for name in names):
            _resolve_data_files_next_to_yaml(local)
            return local
    return _full_task_manager(None if include_path is None else str(Path(include_path).resolve()))


@functools.lru_cache(maxsize=4)
def _full_task_manager(include_path: str | None) -> TaskManager:
    """lm-eval's whole task index (and `include_path`'s), built once per process: ~15k YAMLs take seconds.

    Task configs are re-read from their YAML at every build, so edits show; only YAMLs added to the include
    path later in the same process are not seen.
    """
    from lm_eval.tasks import TaskManager

    manager = TaskManager(include_path=include_path)
    _resolve_data_files_next_to_yaml(manager)
    return manager


def _self_contained(name: str, index: dict[str, IndexEntry], seen: frozenset[str]) -> bool:
    """Whether `name` and everything it refers to (group members, tagged tasks) is in `index`."""
    entry = index.get(name)
    if entry is None or name in seen:
        return False
    if entry.kind.name == "TAG":
        return all(task in index for task in entry.tags)
    if entry.kind.name != "GROUP":
        return True
    return all(_member_contained(item, index, seen | {name}) for item in (entry.cfg or {}).get("task") or [])


def _member_contained(item: object, index: dict[str, IndexEntry], seen: frozenset[str]) -> bool:
    """Whether one item of a group's `task` list (a name, or a dict naming a task or group) is in `index`."""
    if isinstance(item, str):
        return _self_contained(item, index, seen)
    if isinstance(item, dict) and "group" in item:  # a registered group with overrides, or an inline one
        if item["group"] in index:
            return _self_contained(item["group"], index, seen)
        return all(_member_contained(sub, index, seen) for sub in item.get("task") or [])
    # A dict naming an unregistered task is inline, or a built-in one the local index lacks: ask lm-eval's.
    return isinstance(item, dict) and _self_contained(str(item.get("task")), index, seen)


# ------------------------------------------------------------------------------- data next to the YAML
def _resolve_data_files_next_to_yaml(manager: TaskManager) -> None:
    """Make relative `data_files`/`data_dir` in a task YAML relative to that YAML's folder.

    Hooks the config loader of lm-eval's TaskFactory (a private API: on an lm-eval without it, paths stay
    relative to the working directory, lm-eval's own behaviour). A path that exists relative to the working
    directory but not next to the YAML is left alone, so YAMLs written for plain lm-eval keep working.
    """
    factory = getattr(manager, "_factory", None)
    load = getattr(factory, "_load_full_config", None)
    if factory is None or load is None:
        return

    def load_with_local_paths(entry: IndexEntry, overrides: dict[str, object] | None = None) -> dict[str, object]:
        config = load(entry, overrides)
        yaml_path = getattr(entry, "yaml_path", None)
        if yaml_path:
            _rebase_config(config, Path(yaml_path).parent)
        return config

    factory._load_full_config = load_with_local_paths


def _rebase_config(config: dict[str, object], folder: Path) -> None:
    """Rebase the data paths of a task config, and of the inline tasks of a group config, onto `folder`."""
    kwargs = config.get("dataset_kwargs")
    if isinstance(kwargs, dict):
        for key in ("data_files", "data_dir"):
            if key in kwargs:
                kwargs[key] = _rebase(kwargs[key], folder)
    members = config.get("task")
    for member in members if isinstance(members, list) else []:  # inline tasks of a group YAML
        if isinstance(member, dict):
            _rebase_config(member, folder)


def _rebase(value: object, folder: Path) -> object:
    """A data path (or a split → paths mapping, or a list of them) looked up beside the YAML; URLs kept."""
    if isinstance(value, dict):
        return {split: _rebase(files, folder) for split, files in value.items()}
    if isinstance(value, list | tuple):
        return [_rebase(files, folder) for files in value]
    if not isinstance(value, str) or "://" in value or Path(value).expanduser().is_absolute():
        return value
    beside_yaml = str(folder / value)
    if not glob.glob(beside_yaml) and glob.glob(value):  # only found relative to the working directory
        return value
    return beside_yaml
