"""Where local tasks come from: the Python files a local task YAML runs (lm-eval's `!function`)."""

from __future__ import annotations

import json
import shutil

import pytest
from command_line import invoke, invoke_prune_drop
from factories import TASKS_DIR

from layerprobe.core import TaskError
from layerprobe.evaluate.task_sources import by_task_name, check_task_code, local_task_code
from layerprobe.evaluate.tasks import build_tasks

HELPERS = "def keep_all(dataset):\n    return dataset\n"


@pytest.fixture
def tasks_with_code(tmp_path):
    """The test tasks, with the MMLU template and a copy of lp_arc_like (given by path) calling Python."""
    folder = tmp_path / "tasks"
    shutil.copytree(TASKS_DIR, folder)
    template = folder / "_lp_mmlu_template_yaml"
    template.write_text(template.read_text() + "process_docs: !function helpers.keep_all\n")
    (folder / "helpers.py").write_text(HELPERS)
    own = tmp_path / "own"
    own.mkdir()
    arc = (folder / "lp_arc_like.yaml").read_text().replace("task: lp_arc_like", "task: lp_arc_code")
    arc = arc.replace("data/", f"{folder}/data/") + "process_docs: !function code.filters.keep_all\n"
    (own / "lp_arc_code.yaml").write_text(arc)
    (own / "code").mkdir()
    (own / "code" / "filters.py").write_text(HELPERS)
    return folder, own / "lp_arc_code.yaml"


def test_local_task_code_names_the_python_files_a_local_task_runs(tasks_with_code):
    folder, yaml_path = tasks_with_code
    helpers = (folder / "helpers.py").resolve()
    assert local_task_code(["lp_mmlu"], folder) == [helpers]  # group → subjects → included template
    assert local_task_code(["lp_mmlu_stem"], folder) == [helpers]
    assert local_task_code(["lp_arc_like"], folder) == []  # the control: no !function
    assert local_task_code(["lp_arc_like"], None) == []
    assert local_task_code([str(yaml_path)], None) == [(yaml_path.parent / "code" / "filters.py").resolve()]
    assert local_task_code([str(yaml_path), "lp_mmlu", "lp_mmlu_stem"], folder) == [
        (yaml_path.parent / "code" / "filters.py").resolve(),
        helpers,
    ]


def test_unreadable_or_foreign_yamls_name_nothing(tmp_path):
    (tmp_path / "broken.yaml").write_text("task: [unclosed\n")
    (tmp_path / "list.yaml").write_text("- a\n- b\n")
    (tmp_path / "installed.yaml").write_text("task: c\nprocess_docs: !function json.loads\n")  # not beside it
    assert local_task_code(["broken", "a", "c"], tmp_path) == []


def test_a_task_given_by_its_yaml_path_is_keyed_by_the_task_name_it_defines(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "b.yaml").write_text("task: lp_one\ndataset_path: json\n")
    (tmp_path / "a_b.yaml").write_text("task: lp_two\ndataset_path: json\n")  # flattens to the same file name
    (tmp_path / "group.yaml").write_text("group: lp_group\ntask: [lp_one, lp_two]\n")
    (tmp_path / "nameless.yaml").write_text("dataset_path: json\n")
    given = [str(tmp_path / "a" / "b.yaml"), str(tmp_path / "a_b.yaml"), "arc_easy", str(tmp_path / "group.yaml")]
    names, files = by_task_name([*given, str(tmp_path / "nameless.yaml")])
    assert names == ("lp_one", "lp_two", "arc_easy", "lp_group", str(tmp_path / "nameless.yaml"))
    assert files == (("lp_one", given[0]), ("lp_two", given[1]), ("lp_group", given[3]))
    with pytest.raises(TaskError, match="task lp_one is given twice"):
        by_task_name(["lp_one", given[0]])


@pytest.mark.slow
def test_one_task_by_path_or_by_name_is_one_task_to_compare(tiny_checkpoints, tmp_path):
    common = ["--limit", 2, "--layers", "0", "--quiet", "--log-samples"]
    by_path = invoke_prune_drop(
        tiny_checkpoints["llama"], "--task", TASKS_DIR / "lp_arc_like.yaml", *common, "--out", tmp_path / "p"
    )
    by_name = invoke_prune_drop(
        tiny_checkpoints["llama"],
        "--task",
        "lp_arc_like",
        "--include-path",
        TASKS_DIR,
        *common,
        "--out",
        tmp_path / "n",
    )
    assert by_path.exit_code == 0 and by_name.exit_code == 0, by_path.output + by_name.output
    written = json.loads((tmp_path / "p" / "prune_drop.json").read_text())
    assert list(written["tasks"]) == ["lp_arc_like"] and written["settings"]["tasks"] == ["lp_arc_like"]
    assert (tmp_path / "p" / "prune_drop_lp_arc_like.png").is_file()
    assert (tmp_path / "p" / "samples" / "lp_arc_like.jsonl").is_file()
    compared = invoke("compare", tmp_path / "n" / "prune_drop.json", tmp_path / "p" / "prune_drop.json")
    assert compared.exit_code == 0, compared.output


@pytest.mark.slow
def test_prune_drop_says_which_python_a_local_task_runs(tiny_checkpoints, tasks_with_code, tmp_path):
    _, yaml_path = tasks_with_code
    result = invoke_prune_drop(
        tiny_checkpoints["llama"],
        "--task",
        yaml_path,
        "--limit",
        2,
        "--layers",
        "0",
        "--quiet",
        "--trust-task-code",
        "--out",
        tmp_path / "o",
    )
    assert result.exit_code == 0, result.output
    notes = [line for line in result.output.splitlines() if line.startswith("note: the local task YAMLs run Python")]
    assert len(notes) == 1 and str((yaml_path.parent / "code" / "filters.py").resolve()) in notes[0]
    assert list(json.loads((tmp_path / "o" / "prune_drop.json").read_text())["tasks"]) == ["lp_arc_code"]


# A task module that leaves a mark the moment it is imported (lm-eval imports it while loading the YAML).
MARKING = "from pathlib import Path\nPath({marker!r}).write_text('ran')\n\ndef keep_all(dataset):\n    return dataset\n"


@pytest.fixture
def marking_task(tmp_path):
    """lp_arc_like as a YAML of its own whose `process_docs` is a function in marking.py (which leaves a marker)."""
    folder, marker = tmp_path / "task", tmp_path / "marker"
    folder.mkdir()
    arc = (TASKS_DIR / "lp_arc_like.yaml").read_text().replace("task: lp_arc_like", "task: lp_arc_marked")
    arc = arc.replace("data/", f"{TASKS_DIR}/data/") + "process_docs: !function marking.keep_all\n"
    (folder / "lp_arc_marked.yaml").write_text(arc)
    (folder / "marking.py").write_text(MARKING.format(marker=str(marker)))
    return folder / "lp_arc_marked.yaml", marker


@pytest.mark.slow
def test_task_code_runs_only_with_consent(marking_task):
    yaml_path, marker = marking_task
    with pytest.raises(TaskError, match="run Python code .*marking.py.*only when told to") as refused:
        build_tasks([str(yaml_path)])
    assert "--trust-task-code" in refused.value.hint
    assert not marker.exists()  # refused before lm-eval imported the module
    assert check_task_code(["lp_arc_like"], TASKS_DIR, trusted=False) == []  # no code: nothing to consent to
    tasks = build_tasks([str(yaml_path)], trust_code=True)
    assert marker.read_text() == "ran" and "lp_arc_marked" in tasks.tasks


def test_prune_drop_refuses_task_code_without_the_flag_before_any_weight(tiny_checkpoints, marking_task, tmp_path):
    yaml_path, marker = marking_task
    out = tmp_path / "o"
    result = invoke_prune_drop(tiny_checkpoints["llama"], "--task", yaml_path, "--limit", 2, "--out", out)
    assert result.exit_code == 2, result.output
    flat_output = " ".join(result.output.split())
    assert "marking.py" in flat_output and "pass --trust-task-code to run them" in flat_output
    assert "Traceback" not in result.output and not marker.exists() and not out.exists()
