"""Building lm-eval tasks: groups and their members, data files next to the YAML, and every mistake a task
error with a hint (unknown names with suggestions, unreachable data, groups without one score)."""

from __future__ import annotations

import pytest
from factories import TASKS, TASKS_DIR

from layerprobe.core.errors import OFFLINE_HINT, TaskError
from layerprobe.evaluate import tasks as tasks_module
from layerprobe.evaluate.tasks import build_tasks, is_generation_task


def test_build_tasks_structure():
    task_set = build_tasks(list(TASKS), include_path=TASKS_DIR)
    assert task_set.names == tuple(list(TASKS))
    assert task_set.members == {
        "lp_mmlu": ("lp_mmlu_stem", "lp_mmlu_humanities"),
        "lp_arc_like": ("lp_arc_like",),
        "lp_pydoc_ppl": ("lp_pydoc_ppl",),
    }
    assert task_set.loaded["group_map"] == {"lp_mmlu": ["lp_mmlu_stem", "lp_mmlu_humanities"]}
    choice = "multiple_choice"
    assert task_set.output_types == {
        "lp_mmlu_stem": choice,
        "lp_mmlu_humanities": choice,
        "lp_arc_like": choice,
        "lp_pydoc_ppl": "loglikelihood_rolling",
    }
    assert not any(is_generation_task(task_set, name) for name in list(TASKS))
    assert all(task.get_config("num_fewshot") == 0 for task in task_set.tasks.values())


def test_relative_data_files_resolve_next_to_the_yaml_from_any_cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ts = build_tasks(["lp_pydoc_ppl"], include_path=TASKS_DIR)
    assert len(ts.tasks["lp_pydoc_ppl"].eval_docs) == 10
    # A YAML written for plain lm-eval (paths relative to the working directory) still loads.
    (tmp_path / "cwd_relative.yaml").write_text(
        (TASKS_DIR / "lp_pydoc_ppl.yaml").read_text().replace("task: lp_pydoc_ppl", "task: lp_cwd_relative")
    )
    monkeypatch.chdir(TASKS_DIR)
    ts = build_tasks(["lp_cwd_relative"], include_path=tmp_path)
    assert len(ts.tasks["lp_cwd_relative"].eval_docs) == 10


@pytest.mark.slow
def test_unknown_task_suggests_close_names():
    # Not in the include path, so lm-eval's whole index is searched too (the slow part of this file).
    with pytest.raises(TaskError) as caught:
        build_tasks(["lp_mmlu_stm", "mmlu_astronmy"], include_path=TASKS_DIR)
    message = str(caught.value)
    assert "'lp_mmlu_stm' (did you mean lp_mmlu_stem" in message
    assert "'mmlu_astronmy' (did you mean mmlu_astronomy" in message


def test_unreachable_data_is_a_task_error(tmp_path):
    common = (
        "output_type: multiple_choice\ntest_split: test\ndoc_to_text: '{{q}}'\ndoc_to_target: 0\n"
        "doc_to_choice: ['a', 'b']\n"
    )
    (tmp_path / "hub.yaml").write_text("task: lp_hub\ndataset_path: no-such-org/no-such-data\n" + common)
    missing = "dataset_kwargs: {data_files: {test: data/missing.jsonl}}\n"
    (tmp_path / "local.yaml").write_text("task: lp_local\ndataset_path: json\n" + missing + common)
    with pytest.raises(TaskError) as hub:
        build_tasks(["lp_hub"], include_path=tmp_path)
    assert "no-such-org/no-such-data" in str(hub.value) and hub.value.hint == OFFLINE_HINT
    with pytest.raises(TaskError) as local:
        build_tasks(["lp_local"], include_path=tmp_path)
    assert str(tmp_path / "data" / "missing.jsonl") in str(local.value)
    assert local.value.hint == tasks_module.LOCAL_FILES_HINT


def test_groups_without_a_single_score_and_duplicates_are_task_errors(tmp_path):
    data = TASKS_DIR / "data" / "arc_like_test.jsonl"
    task = (
        "dataset_path: json\ndataset_kwargs: {{data_files: {{test: {data}}}}}\n"
        "output_type: multiple_choice\ntest_split: test\ndoc_to_text: '{{{{question}}}}'\n"
        "doc_to_target: 0\ndoc_to_choice: '{{{{choices.text}}}}'\n"
    )
    (tmp_path / "a.yaml").write_text(f"task: lp_a\ntag: lp_tag\n{task.format(data=data)}")
    (tmp_path / "b.yaml").write_text(f"task: lp_b\ntag: lp_tag\n{task.format(data=data)}")
    (tmp_path / "group.yaml").write_text("group: lp_plain_group\ntask: [lp_a, lp_b]\n")
    with pytest.raises(TaskError, match="no aggregate_metric_list"):
        build_tasks(["lp_plain_group"], include_path=tmp_path)
    with pytest.raises(TaskError, match="tag for several tasks"):
        build_tasks(["lp_tag"], include_path=tmp_path)
    with pytest.raises(TaskError, match="asked for twice"):
        build_tasks(["lp_mmlu", "lp_mmlu_stem"], include_path=TASKS_DIR)
