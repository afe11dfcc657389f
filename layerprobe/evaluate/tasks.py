"""lm-evaluation-harness tasks, built once and reused for every model variant.

Building tasks is the part of an lm-eval run that does not depend on the model, and it is slow: indexing
lm-eval's ~15k task YAML files takes seconds, `mmlu` instantiates 57 subjects and loads a dataset for
each. `prune-drop` scores L+1 variants of one model on the same tasks, so `build_tasks` does all of that
once and returns a `TaskSet`; `harness.evaluate` re-seeds and reuses it for every variant.

A name that lm-eval does not know, whose data cannot be reached offline, or that has no single score (a
tag, a group without aggregate metrics) is a user mistake: it raises `TaskError` with suggestions or a
hint instead of lm-eval's traceback. Where the tasks come from (YAML checks, the include path, the
task index) is `task_sources.py`.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from layerprobe.core import OFFLINE_HINT, TaskError
from layerprobe.evaluate.lm_eval_globals import quiet_lm_eval, seed_everything
from layerprobe.evaluate.task_sources import (
    YAML_SUFFIXES,
    check_task_code,
    check_task_yaml,
    is_yaml_file,
    task_manager,
    unreadable_yamls,
)

if TYPE_CHECKING:
    from lm_eval.api.group import ConfigurableGroup
    from lm_eval.api.task import Task
    from lm_eval.tasks import TaskManager

LOCAL_FILES_HINT = "check data_files in the task YAML (relative paths are looked up in the YAML's folder)"
GENERATION = "generate_until"


class LoadedTasks(TypedDict):
    """What `TaskManager.load` returns (and lm-eval's `evaluate` takes as its `task_dict`)."""

    tasks: dict[str, Task]  # leaf task name → Task
    groups: dict[str, ConfigurableGroup]  # group name → Group
    group_map: dict[str, list[str]]  # group name → the names of its direct children


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
    loaded: LoadedTasks
    result_names: dict[str, str]
    members: dict[str, tuple[str, ...]]
    output_types: dict[str, str]
    num_fewshot: int | None
    seed: int

    @property
    def tasks(self) -> dict[str, Task]:
        """Every leaf task, by name (the objects lm-eval fills with requests on each evaluation)."""
        return self.loaded["tasks"]


def is_generation_task(task_set: TaskSet, name: str) -> bool:
    """Whether `name` (a task or group of `task_set`) generates text for any of its tasks.

    Only loglikelihood-type tasks (`multiple_choice`, `loglikelihood`, `loglikelihood_rolling`) can be
    scored by layerprobe's faster engine; a group with one generating subtask cannot.
    """
    return any(task_set.output_types[leaf] == GENERATION for leaf in task_set.members[name])


def build_tasks(
    names: list[str],
    include_path: str | Path | None = None,
    num_fewshot: int | None = None,
    seed: int = 1234,
    files: Mapping[str, str] | None = None,
    trust_code: bool = False,
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
        files: name → the task YAML it is loaded from (`task_sources.by_task_name`); the TaskSet is keyed
            by the name.
        trust_code: Run the Python a local task YAML names (lm-eval's `!function`); refused otherwise
            (`task_sources.check_task_code`), before lm-eval imports it.

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
    sources = {name: (files or {}).get(name, name) for name in names}
    for source in sources.values():
        if source.endswith(YAML_SUFFIXES):
            check_task_yaml(Path(source).expanduser(), source)
    check_task_code(list(sources.values()), include_path, trust_code)
    with quiet_lm_eval():
        manager = task_manager(list(sources.values()), include_path)
        unknown = [src for src in sources.values() if src not in manager.task_index and not is_yaml_file(src)]
        if unknown:
            broken = unreadable_yamls(include_path)
            raise TaskError(
                _unknown_message(unknown, manager.all_tasks)
                + (f"; {len(broken)} YAML file(s) in --include-path cannot be read: {broken[0]}" if broken else ""),
                hint="fix that YAML (lm-eval skips unreadable ones)"
                if broken
                else "list them with `lm-eval ls tasks`; local task YAMLs need --include-path",
            )
        seed_everything(seed)
        loaded: LoadedTasks = {"tasks": {}, "groups": {}, "group_map": {}}
        result_names: dict[str, str] = {}
        members: dict[str, tuple[str, ...]] = {}
        claimed: dict[str, str] = {}  # leaf task → the name that asked for it
        for name in names:
            part = _load(manager, sources[name])
            result_names[name] = _root_name(name, part)
            members[name] = tuple(part["tasks"])
            for leaf in part["tasks"]:
                if leaf in claimed:
                    raise TaskError(
                        f"task {leaf} is asked for twice (by {claimed[leaf]} and by {name})",
                        hint="a group already evaluates its subtasks; name each task once",
                    )
                claimed[leaf] = name
            loaded["tasks"].update(part.get("tasks") or {})
            loaded["groups"].update(part.get("groups") or {})
            loaded["group_map"].update(part.get("group_map") or {})
        for leaf, task in loaded["tasks"].items():
            _set_fewshot(task, num_fewshot)
            _check_fewshot_pool(leaf, task, num_fewshot)
            task.set_fewshot_seed(seed=seed)
    output_types = {leaf: task.get_config("output_type") for leaf, task in loaded["tasks"].items()}
    return TaskSet(tuple(names), loaded, result_names, members, output_types, num_fewshot, seed)


def _check_fewshot_pool(leaf: str, task: Task, override: int | None) -> None:
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


def _unknown_message(unknown: list[str], known: list[str]) -> str:
    """The "unknown lm-eval task(s)" message, with lm-eval's closest names for each (did you mean …?)."""
    parts = []
    for name in unknown:
        close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
        parts.append(f"'{name}'" + (f" (did you mean {', '.join(close)}?)" if close else ""))
    return f"unknown lm-eval task{'s' if len(unknown) > 1 else ''}: {'; '.join(parts)}"


def _load(manager: TaskManager, name: str) -> LoadedTasks:
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


def _root_name(name: str, part: LoadedTasks) -> str:
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


def _set_fewshot(task: Task, num_fewshot: int | None) -> None:
    """lm-eval's rule (simple_evaluate): override, unless the YAML fixes 0; no default means 0."""
    default = task.get_config("num_fewshot")
    if num_fewshot is not None and default != 0:
        task.set_config(key="num_fewshot", value=num_fewshot)
    elif default is None:
        task.set_config(key="num_fewshot", value=0)
