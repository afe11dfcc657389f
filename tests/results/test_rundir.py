"""Every file name a run writes comes from results/rundir.py, and the names are the ones earlier versions wrote."""

from __future__ import annotations

import ast
import re

import pytest
from source_code import PACKAGE, string_literals

from layerprobe.results import RunDir, rank_suffix
from layerprobe.results.rundir import curve_name, figure_name, sample_name

# Names of a Hugging Face checkpoint's own files (read, or written by an export): not a run's files.
CHECKPOINT_FILES = {"config.json", "model.safetensors.index.json", "pytorch_model.bin.index.json"}
FILE_NAME = re.compile(r"^[\w.{}\-]+\.(json|jsonl|png|pdf)$")


def test_result_and_state_files_keep_their_names(tmp_path):
    run = RunDir(tmp_path)
    assert run.angular_json == tmp_path / "angular.json"
    assert run.prune_drop_json == tmp_path / "prune_drop.json"
    assert run.depth_json == tmp_path / "depth.json"
    assert run.prune_curve_json == tmp_path / "prune_curve.json"
    assert run.result_json("prune_drop") == run.prune_drop_json
    assert run.shard_json == tmp_path / "prune_drop.shard.json"
    assert run.export_record == tmp_path / "layerprobe.json"
    assert run.partial_json() == tmp_path / "prune_drop.partial.json"
    assert run.partial_json(rank_suffix(1, 2)) == tmp_path / "prune_drop.partial.rank1.json"
    assert rank_suffix(0, 1) == ""
    assert run.journal(rank_suffix(3, 4)) == tmp_path / "prune_drop.answers.rank3.jsonl"
    assert run.partial_sample_file("a/b", ".rank0") == tmp_path / "prune_drop.partial.samples.rank0" / "a_b.jsonl"
    assert run.sample_file("mmlu/abstract algebra") == tmp_path / "samples" / "mmlu_abstract_algebra.jsonl"
    for name in ("prune_drop.partial.json", "prune_drop.partial.rank0.json", "prune_drop.partial.rank1.json"):
        (tmp_path / name).write_text("{}")
    (tmp_path / "prune_drop.json").write_text("{}")
    assert [p.name for p in run.partial_jsons()] == [
        "prune_drop.partial.json",
        "prune_drop.partial.rank0.json",
        "prune_drop.partial.rank1.json",
    ]


def test_figures_keep_their_names(tmp_path):
    run = RunDir(str(tmp_path))  # a str is taken as a path
    assert run.plot("angular") == tmp_path / "angular.png" and run.plot("depth", suffix="pdf") == tmp_path / "depth.pdf"
    assert run.plot("compare") == tmp_path / "compare.png"
    assert run.plot("compare", "prune_drop") == tmp_path / "compare_prune_drop.png"
    assert run.plot("prune_curve", "a b/c") == tmp_path / "prune_curve_a b_c.png"
    assert run.plot("prune_drop", "a b/c") == tmp_path / "prune_drop_a_b_c.png"
    assert [p.name for p in run.task_plots("prune_drop", ["a/b", "a_b", "a b", "x"])] == [
        "prune_drop_a_b.png",
        "prune_drop_a_b-2.png",
        "prune_drop_a_b-3.png",
        "prune_drop_x.png",
    ]
    with pytest.raises(ValueError, match="no figure of kind"):
        run.plot("heatmap")


def test_the_three_task_name_rules_differ_as_documented():
    """Kept byte-identical to the names earlier versions wrote; a later change may unify them."""
    assert figure_name("../x") == "_x" and sample_name("../x") == ".._x.jsonl" and curve_name("../x") == ".._x"
    assert figure_name("...") == "task" and sample_name("...") == "....jsonl"
    assert figure_name("a:b") == "a_b" and sample_name("a:b") == "a_b.jsonl" and curve_name("a:b") == "a:b"


def test_no_file_name_of_a_run_is_spelled_outside_rundir():
    found = [
        f"{path.relative_to(PACKAGE.parent)}:{line}: {text}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path != PACKAGE / "results" / "rundir.py"
        for line, text in string_literals(ast.parse(path.read_text(encoding="utf-8")))
        if FILE_NAME.match(text) and text not in CHECKPOINT_FILES
    ]
    assert found == [], "name the file in results/rundir.py (RunDir) and use it from there"
