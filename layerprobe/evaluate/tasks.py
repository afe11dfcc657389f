"""lm-evaluation-harness tasks, built once and reused for every model variant.

Building tasks is the part of an lm-eval run that does not depend on the model, and it is slow: indexing
lm-eval's ~15k task YAML files takes seconds, `mmlu` instantiates 57 subjects and loads a dataset for
each. `prune-drop` scores L+1 variants of one model on the same tasks, so `build_tasks` does all of that
once and returns a `TaskSet`; `harness.evaluate` re-seeds and reuses it for every variant.

Two things lm-eval leaves to the caller are settled here:
- Relative `data_files` / `data_dir` in a local task YAML are resolved against the folder of that YAML
  (lm-eval hands them to `datasets.load_dataset` untouched, which resolves them against the current
  working directory, so a task folder would only work when run from one place).
- A name that lm-eval does not know, or whose data cannot be reached offline, is a user mistake: it
  raises `TaskError` with suggestions or a hint instead of lm-eval's traceback.
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import glob
import io
import logging
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from layerprobe.core import OFFLINE_HINT, TaskError

LOCAL_FILES_HINT = "check data_files in the task YAML (relative paths are looked up in the YAML's folder)"
GENERATION = "generate_until"


@dataclass
class TaskSet:
    """lm-eval tasks built once by `build_tasks`, evaluated again for every model variant.

    Attributes:
        names: The names asked for, in order; `harness.evaluate` keys its results by these.
        loaded: What `TaskManager.load` returns, merged over all names: `tasks` (leaf name → Task),
            `groups` (name → Group) and `group_map` (group → its direct children).
        result_names: Asked name → the name lm-eval reports it under (they differ only for a YAML path).
        members: Asked name → the leaf tasks it evaluates (just itself for a plain task).
        output_types: Leaf task → lm-eval output type (`multiple_choice`, `loglikelihood`,
            `loglikelihood_rolling` or `generate_until`).
        num_fewshot: The few-shot override given to `build_tasks` (None: every task's own default).
        seed: The seed `harness.evaluate` re-seeds every RNG and few-shot sampler with by default.
    """

    names: tuple[str, ...]
    loaded: dict[str, Any]
    result_names: dict[str, str]
    members: dict[str, tuple[str, ...]]
    output_types: dict[str, str]
    num_fewshot: int | None
    seed: int

    @property
    def tasks(self) -> dict[str, Any]:
        """Every leaf task, by name (the objects lm-eval fills with requests on each evaluation)."""
        return self.loaded["tasks"]


def is_generation_task(task_set: TaskSet, name: str) -> bool:
    """Whether `name` (a task or group of `task_set`) generates text for any of its tasks.

    Only loglikelihood-type tasks (`multiple_choice`, `loglikelihood`, `loglikelihood_rolling`) can be
    scored by layerprobe's faster engine; a group with one generating subtask cannot.
    """
    return any(task_set.output_types[leaf] == GENERATION for leaf in task_set.members[name])


@contextlib.contextmanager
def quiet_lm_eval() -> Iterator[None]:
    """Silence lm-eval's INFO/WARNING logging, every tqdm bar and its stray prints, then restore them.

    layerprobe draws one rich progress bar per evaluation; lm-eval would interleave a tqdm bar per request
    type, "Building contexts" lines and `print`s (bootstrap, batch-size detection) on stdout, where
    layerprobe writes results. lm-eval creates its bars with no way to turn them off, so tqdm's
    constructor is made to disable every bar while the context lasts (not thread-safe: bars of other
    threads are silenced too). Errors are still logged.
    """
    import tqdm.std

    logger = logging.getLogger("lm_eval")
    level, init = logger.level, tqdm.std.tqdm.__init__

    def silent_init(self, *args: Any, **kwargs: Any) -> None:
        kwargs["disable"] = True
        init(self, *args, **kwargs)

    logger.setLevel(logging.ERROR)
    tqdm.std.tqdm.__init__ = silent_init
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            yield
    finally:
        tqdm.std.tqdm.__init__ = init
        logger.setLevel(level)


def seed_everything(seed: int) -> None:
    """Seed python's `random`, numpy and torch with one seed, as `lm_eval --seed N` does.

    (`simple_evaluate`'s own defaults differ: random 0, numpy and torch 1234; tasks that shuffle with the
    global `random` then see other prompts than a default lm-eval run. Every variant sees the same ones.)
    """
    import numpy as np
    from lm_eval.utils import set_torch_seed

    random.seed(seed)
    np.random.seed(seed)
    set_torch_seed(seed)


def build_tasks(
    names: list[str], include_path: str | Path | None = None, num_fewshot: int | None = None, seed: int = 1234
) -> TaskSet:
    """Build lm-eval tasks and groups once, configured as `lm_eval.simple_evaluate` configures them.

    Args:
        names: Registered task or group names (`arc_easy`, `mmlu`, a task under `include_path`) or paths
            to task YAML files. A group is scored by its aggregate metrics, so it must define an
            `aggregate_metric_list` (lm-eval's `mmlu` does).
        include_path: A folder of extra task YAMLs; its tasks take precedence over lm-eval's own. When
            every name is found there, lm-eval's own index (seconds to build) is skipped.
        num_fewshot: Few-shot examples per document for every task, except tasks whose YAML fixes 0
            (lm-eval's rule). None keeps each task's default (0 when it has none).
        seed: Seed for python/numpy/torch while tasks load (a task may shuffle its documents) and for
            every few-shot sampler; `harness.evaluate` re-seeds with it before each evaluation.

    Raises:
        TaskError: A name lm-eval does not know (with suggestions), data that cannot be reached (offline),
            a group without aggregate metrics, a tag or a task asked for twice.
    """
    if not names:
        raise TaskError("no evaluation task given", hint="name one, e.g. --task arc_easy or --task mmlu")
    if include_path is not None and not Path(include_path).exists():
        raise TaskError(f"include path {include_path} does not exist", hint="give a folder of task YAMLs")
    if include_path is not None and not Path(include_path).is_dir():
        raise TaskError(
            f"--include-path {include_path} is a file, not a folder of task YAMLs",
            hint=f"pass its folder (--include-path {Path(include_path).parent}), or the YAML itself as --task",
        )
    for name in names:
        if name.endswith((".yaml", ".yml")):
            _check_yaml(Path(name).expanduser(), name)
    with quiet_lm_eval():
        manager = _task_manager(names, include_path)
        unknown = [name for name in names if name not in manager.task_index and not _is_yaml_file(name)]
        if unknown:
            broken = _broken_yamls(include_path)
            raise TaskError(
                _unknown_message(unknown, manager.all_tasks)
                + (f"; {len(broken)} YAML file(s) in --include-path cannot be read: {broken[0]}" if broken else ""),
                hint="fix that YAML (lm-eval skips unreadable ones)"
                if broken
                else "list them with `lm-eval ls tasks`; local task YAMLs need --include-path",
            )
        seed_everything(seed)
        loaded: dict[str, Any] = {"tasks": {}, "groups": {}, "group_map": {}}
        result_names, members, claimed = {}, {}, {}
        for name in names:
            part = _load(manager, name)
            result_names[name] = _root_name(name, part)
            members[name] = tuple(part["tasks"])
            for leaf in part["tasks"]:
                if leaf in claimed:
                    raise TaskError(
                        f"task {leaf} is asked for twice (by {claimed[leaf]} and by {name})",
                        hint="a group already evaluates its subtasks; name each task once",
                    )
                claimed[leaf] = name
            for key in loaded:
                loaded[key].update(part.get(key) or {})
        for leaf, task in loaded["tasks"].items():
            _set_fewshot(task, num_fewshot)
            _check_fewshot_pool(leaf, task, num_fewshot)
            task.set_fewshot_seed(seed=seed)
    output_types = {leaf: task.get_config("output_type") for leaf, task in loaded["tasks"].items()}
    return TaskSet(tuple(names), loaded, result_names, members, output_types, num_fewshot, seed)


def _check_fewshot_pool(leaf: str, task: Any, override: int | None) -> None:
    """Refuse more few-shot examples than the task's few-shot pool holds (lm-eval fails deep inside).

    When the examples come from the split being evaluated, lm-eval draws one more and drops the document
    itself, so the pool must hold one more than asked.
    """
    shots = task.get_config("num_fewshot") or 0
    if shots <= 0:
        return
    docs = task.fewshot_docs()
    pool = 0 if docs is None else len(docs)
    fewshot_cfg = getattr(task, "fewshot_cfg", None)
    same_split = fewshot_cfg is not None and fewshot_cfg.split == task.get_config("test_split")
    needed = shots + 1 if same_split else shots
    if pool < needed:
        usable = max(0, pool - 1) if same_split else pool
        given = f"--num-fewshot {override}" if override is not None else f"its default of {shots} few-shot examples"
        raise TaskError(
            f"task {leaf} has {pool} few-shot examples"
            + (" (drawn from the evaluated split, minus the document itself)" if same_split else "")
            + f", fewer than {given} needs",
            hint=f"use --num-fewshot {usable} or less",
        )


def _task_manager(names: list[str], include_path: str | Path | None) -> Any:
    """A TaskManager that knows every name: the include path alone if it suffices, else lm-eval's too."""
    from lm_eval.tasks import TaskManager

    if include_path is not None:
        local = TaskManager(include_path=str(include_path), include_defaults=False)
        if all(_self_contained(name, local.task_index, frozenset()) for name in names):
            _resolve_data_files_next_to_yaml(local)
            return local
    return _full_task_manager(None if include_path is None else str(Path(include_path).resolve()))


@functools.lru_cache(maxsize=4)
def _full_task_manager(include_path: str | None) -> Any:
    """lm-eval's whole task index (and `include_path`'s), built once per process: ~15k YAMLs take seconds.

    Task configs are re-read from their YAML at every build, so edits show; only YAMLs added to the include
    path later in the same process are not seen.
    """
    from lm_eval.tasks import TaskManager

    manager = TaskManager(include_path=include_path)
    _resolve_data_files_next_to_yaml(manager)
    return manager


def _self_contained(name: str, index: dict[str, Any], seen: frozenset[str]) -> bool:
    """Whether `name` and everything it refers to (group members, tagged tasks) is in `index`."""
    entry = index.get(name)
    if entry is None or name in seen:
        return False
    if entry.kind.name == "TAG":
        return all(task in index for task in entry.tags)
    if entry.kind.name != "GROUP":
        return True
    return all(_member_contained(item, index, seen | {name}) for item in (entry.cfg or {}).get("task") or [])


def _member_contained(item: Any, index: dict[str, Any], seen: frozenset[str]) -> bool:
    if isinstance(item, str):
        return _self_contained(item, index, seen)
    if isinstance(item, dict) and "group" in item:  # a registered group with overrides, or an inline one
        if item["group"] in index:
            return _self_contained(item["group"], index, seen)
        return all(_member_contained(sub, index, seen) for sub in item.get("task") or [])
    # A dict naming an unregistered task is inline, or a built-in one the local index lacks: ask lm-eval's.
    return isinstance(item, dict) and _self_contained(str(item.get("task")), index, seen)


def _resolve_data_files_next_to_yaml(manager: Any) -> None:
    """Make relative `data_files`/`data_dir` in a task YAML relative to that YAML's folder.

    Hooks the config loader of lm-eval's TaskFactory (a private API: on an lm-eval without it, paths stay
    relative to the working directory, lm-eval's own behaviour). A path that exists relative to the working
    directory but not next to the YAML is left alone, so YAMLs written for plain lm-eval keep working.
    """
    factory = getattr(manager, "_factory", None)
    load = getattr(factory, "_load_full_config", None)
    if load is None:
        return

    def load_with_local_paths(entry: Any, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
        config = load(entry, overrides)
        if getattr(entry, "yaml_path", None):
            _rebase_config(config, Path(entry.yaml_path).parent)
        return config

    factory._load_full_config = load_with_local_paths


def _rebase_config(config: dict[str, Any], folder: Path) -> None:
    kwargs = config.get("dataset_kwargs")
    if isinstance(kwargs, dict):
        for key in ("data_files", "data_dir"):
            if key in kwargs:
                kwargs[key] = _rebase(kwargs[key], folder)
    members = config.get("task")
    for member in members if isinstance(members, list) else []:  # inline tasks of a group YAML
        if isinstance(member, dict):
            _rebase_config(member, folder)


def _rebase(value: Any, folder: Path) -> Any:
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


def _yaml_problem(path: Path) -> str | None:
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


def _check_yaml(path: Path, name: str) -> None:
    """A task given as a YAML path must exist and parse; say what is wrong instead of "unknown task"."""
    if not path.is_file():
        raise TaskError(f"task YAML {name} does not exist", hint="check the path")
    problem = _yaml_problem(path)
    if problem is not None:
        raise TaskError(f"task YAML cannot be read: {problem}", hint="fix the YAML syntax (lm-eval task format)")


def _broken_yamls(include_path: str | Path | None) -> list[str]:
    """The unreadable YAMLs under --include-path, which lm-eval's index silently leaves out."""
    if include_path is None:
        return []
    found = []
    for path in sorted(Path(include_path).rglob("*.y*ml")):
        problem = _yaml_problem(path)
        if problem is not None:
            found.append(problem)
    return found


def _is_yaml_file(name: str) -> bool:
    return name.endswith((".yaml", ".yml")) and Path(name).expanduser().is_file()


def _unknown_message(unknown: list[str], known: list[str]) -> str:
    parts = []
    for name in unknown:
        close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
        parts.append(f"'{name}'" + (f" (did you mean {', '.join(close)}?)" if close else ""))
    return f"unknown lm-eval task{'s' if len(unknown) > 1 else ''}: {'; '.join(parts)}"


def _load(manager: Any, name: str) -> dict[str, Any]:
    """`TaskManager.load` for one name, with unreachable data turned into a `TaskError`."""
    from datasets.exceptions import DatasetNotFoundError

    try:
        return manager.load([name])
    except (ConnectionError, FileNotFoundError, ValueError) as error:
        # datasets raises these for: the hub unreachable or offline (ConnectionError), missing local files
        # (FileNotFoundError), offline with only other configs of the dataset cached (ValueError).
        text = str(error).strip()
        if isinstance(error, ValueError) and not text.startswith("Couldn't find cache"):
            raise
        local = isinstance(error, FileNotFoundError) and not isinstance(error, DatasetNotFoundError)
        detail = text.splitlines()[0] if text else type(error).__name__
        raise TaskError(
            f"the data of task {name} cannot be loaded: {detail}", hint=LOCAL_FILES_HINT if local else OFFLINE_HINT
        ) from error


def _root_name(name: str, part: dict[str, Any]) -> str:
    """The one task or group `name` stands for in lm-eval's results; TaskError if it has no single score."""
    groups = part.get("groups") or {}
    children = {child for group in groups.values() for child in group.child_names}
    roots = [group for key, group in groups.items() if key not in children]
    if len(roots) == 1:
        if not roots[0].has_aggregation:
            raise TaskError(
                f"group {name} defines no aggregate_metric_list, so it has no single score",
                hint=f"name its tasks instead: {', '.join(part['tasks'])}",
            )
        return roots[0].name
    if not groups and len(part["tasks"]) == 1:
        return next(iter(part["tasks"]))
    raise TaskError(
        f"{name} is a tag for several tasks, not one task or group",
        hint=f"name its tasks instead: {', '.join(part['tasks'])}",
    )


def _set_fewshot(task: Any, num_fewshot: int | None) -> None:
    """lm-eval's rule (simple_evaluate): override, unless the YAML fixes 0; no default means 0."""
    default = task.get_config("num_fewshot")
    if num_fewshot is not None and default != 0:
        task.set_config(key="num_fewshot", value=num_fewshot)
    elif default is None:
        task.set_config(key="num_fewshot", value=0)
