"""Resuming an interrupted prune-drop: recompute nothing that was saved, refuse to mix two different runs."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from pathlib import Path

import pytest
from command_line import RESULT, assert_one_line_error, invoke_prune_drop
from factories import PRUNE_SETTINGS, TASKS_DIR, loaded_head, model_info, prune_spec
from watching import comparable

from layerprobe.core import ModelSpec, PruneSpec
from layerprobe.core.errors import ResultError
from layerprobe.model.progress import Progress
from layerprobe.model.stack import find_layers
from layerprobe.prune.drop import run_prune_drop
from layerprobe.prune.state import PARTIAL_NAME, PruneState, files_stat_digest, fingerprint
from layerprobe.results.evaluation import Evaluation

RESUME_TASKS = ("lp_arc_like", "lp_pydoc_ppl")
ORDER = [
    ("lp_arc_like", None),
    ("lp_pydoc_ppl", None),
    ("lp_arc_like", 0),
    ("lp_pydoc_ppl", 0),
    ("lp_arc_like", 3),
    ("lp_pydoc_ppl", 3),
]


def resume_spec(path, **overrides) -> PruneSpec:
    settings = dict(tasks=RESUME_TASKS, limit=2, num_fewshot=None)
    settings.update(overrides)
    return prune_spec(path, **settings)


def done_entries(out: Path) -> set[tuple[str, str]]:
    data = json.loads((out / PARTIAL_NAME).read_text())
    assert data["schema"] == "layerprobe/prune-drop-partial@1"
    return {(task, variant) for task, variants in data["done"].items() for variant in variants}


@pytest.mark.slow  # over 2.5 s on 2 cores: the default tier stays under 3 minutes
def test_resume_continues_an_interrupted_run_and_recomputes_nothing(tiny_checkpoints, tmp_path, spy):
    path = tiny_checkpoints["llama"]
    loaded = loaded_head(path)
    full = run_prune_drop(resume_spec(path), tmp_path / "full", loaded=loaded, progress=spy.progress)
    assert spy.recorded == ORDER

    k, out = 3, tmp_path / "interrupted"
    spy.reset()

    def interrupting(event):  # Ctrl-C right after the k-th evaluation was saved
        spy.recorded.append((event.task, event.variant))
        if len(spy.recorded) == k:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_prune_drop(resume_spec(path), out, loaded=loaded, progress=Progress(on_evaluation=interrupting))
    assert spy.recorded == ORDER[:k]
    assert done_entries(out) == {(task, "baseline" if layer is None else str(layer)) for task, layer in ORDER[:k]}
    assert not (out / RESULT).exists()
    assert find_layers(loaded.model).num_layers == 4  # the interrupted variant's block is back

    # A different experiment may not continue this one; the progress file is left as it was.
    before = (out / PARTIAL_NAME).read_text()
    for overrides, field in (
        ({"limit": 3}, "limit"),
        ({"num_fewshot": 1}, "num_fewshot"),
        ({"seed": 7}, "seed"),
        ({"prefix_reuse": False}, "prefix_reuse"),
    ):
        with pytest.raises(ResultError, match=f"different run .*{field}: was"):
            run_prune_drop(resume_spec(path, **overrides), out, resume=True, loaded=loaded)
    with pytest.raises(ResultError, match="model: was"):
        run_prune_drop(resume_spec(tiny_checkpoints["gpt2"]), out, resume=True)
    refused = invoke_prune_drop(
        path,
        *[a for t in RESUME_TASKS for a in ("--task", t)],
        "--include-path",
        TASKS_DIR,
        "--layers",
        "0,3",
        "--limit",
        3,
        "--batch-size",
        PRUNE_SETTINGS["batch_size"],
        "--device",
        "cpu",
        "--quiet",
        "--out",
        out,
        "--resume",
    )
    assert_one_line_error(refused, "--resume refuses to mix results of a different run (limit: was 2, now 3.0)", out)
    assert (out / PARTIAL_NAME).read_text() == before

    # Without --resume the unfinished run is not silently overwritten either.
    with pytest.raises(ResultError, match="unfinished prune-drop run"):
        run_prune_drop(resume_spec(path), out, loaded=loaded)
    assert (out / PARTIAL_NAME).read_text() == before

    spy.reset()
    resumed = run_prune_drop(resume_spec(path), out, resume=True, loaded=loaded, progress=spy.progress)
    assert spy.recorded == ORDER[k:]  # only what was missing
    assert comparable(resumed) == comparable(full)
    assert json.loads((out / RESULT).read_text())["tasks"] == full.to_dict()["tasks"]
    assert not (out / PARTIAL_NAME).exists()


def test_resume_with_an_extra_task_computes_only_that_task(tiny_checkpoints, tmp_path, spy):
    path = tiny_checkpoints["llama"]
    loaded = loaded_head(path)
    advanced = {"n": 0}

    def stop_after_the_last(amount):  # every evaluation finished, interrupted before the result is written
        advanced["n"] += amount
        if advanced["n"] == len(ORDER):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_prune_drop(resume_spec(path), tmp_path, loaded=loaded, progress=Progress(on_advance=stop_after_the_last))
    assert len(done_entries(tmp_path)) == len(ORDER) and not (tmp_path / RESULT).exists()

    spy.reset()
    result = run_prune_drop(
        resume_spec(path, tasks=(*RESUME_TASKS, "lp_mmlu")), tmp_path, resume=True, loaded=loaded, progress=spy.progress
    )
    assert spy.recorded == [("lp_mmlu", None), ("lp_mmlu", 0), ("lp_mmlu", 3)]
    assert list(result.tasks) == [*RESUME_TASKS, "lp_mmlu"]
    alone = run_prune_drop(resume_spec(path, tasks=("lp_mmlu",)), tmp_path / "alone", loaded=loaded)
    assert result.tasks["lp_mmlu"] == alone.tasks["lp_mmlu"]


def test_a_retrained_local_checkpoint_is_a_different_run(tmp_path):
    """Local checkpoints have no commit hash: their files pin them, so --resume cannot mix two trainings."""
    checkpoint = tmp_path / "ckpt"
    checkpoint.mkdir()
    (checkpoint / "model.safetensors").write_bytes(b"weights of run 1")
    first = files_stat_digest(str(checkpoint))
    assert files_stat_digest(str(checkpoint)) == first
    (checkpoint / "model.safetensors").write_bytes(b"weights of run 2, retrained")
    os.utime(checkpoint / "model.safetensors", ns=(1, 1))
    assert files_stat_digest(str(checkpoint)) != first
    assert files_stat_digest(str(tmp_path / "missing")).endswith("@missing")


def test_fingerprint_separates_loading_options(tmp_path):
    spec = PruneSpec(model=ModelSpec("org/m"), tasks=("lp_arc_like",))
    loaded = dict(commit="abc", dtype="bfloat16")  # a local checkpoint's model, loaded as the run loaded it
    plain = fingerprint(spec, model_info(2, **loaded))
    for changed in (
        {"quantization": "bitsandbytes-4bit-nf4"},
        {"attn_implementation": "eager"},
        {"model_args": {"max_memory": {"0": "20GiB"}}},
    ):
        other = fingerprint(spec, model_info(2, **loaded, **changed))
        assert other != plain
        state = PruneState.open(tmp_path / "run", plain, resume=False)
        state.record("lp_arc_like", None, Evaluation(metrics={}, num_fewshot=0, samples=1, engine="simple"))
        with pytest.raises(ResultError):
            PruneState.open(tmp_path / "run", other, resume=True)
        state.remove()
    bounded = PruneSpec(model=ModelSpec("org/m"), tasks=("lp_arc_like",), max_state_bytes=2**20)
    assert fingerprint(bounded, model_info(2, **loaded)) != plain


# ------------------------------------------------------------------ damaged resume state, end to end
def interrupted_after(k: int, recorded: list) -> Progress:
    def on_evaluation(event):
        recorded.append((event.task, event.variant))
        if len(recorded) == k:
            raise KeyboardInterrupt

    return Progress(on_evaluation=on_evaluation)


def test_damaged_resume_state_is_recomputed_and_the_resumed_result_equals_a_clean_run(
    tiny_checkpoints, tmp_path, monkeypatch
):
    path = tiny_checkpoints["llama"]
    loaded = loaded_head(path)
    spec = resume_spec(path, tasks=("lp_arc_like",), engine="shared", prefix_reuse=False, layers="0,3", batch_size=2)
    full = run_prune_drop(spec, tmp_path / "full", loaded=loaded)

    out, recorded = tmp_path / "damaged", []
    with pytest.raises(KeyboardInterrupt):
        run_prune_drop(spec, out, loaded=loaded, progress=interrupted_after(2, recorded))
    assert recorded == [("lp_arc_like", None), ("lp_arc_like", 0)]
    # An edited number in the progress file (still valid JSON), a deleted per-document row of the
    # baseline, and an edited answer in the shared engine's journal.
    partial = json.loads((out / PARTIAL_NAME).read_text())
    partial["done"]["lp_arc_like"]["0"]["metrics"]["acc"]["value"] += 0.25
    (out / PARTIAL_NAME).write_text(json.dumps(partial))
    rows = out / "prune_drop.partial.samples" / "lp_arc_like.jsonl"
    lines = rows.read_text().splitlines()
    rows.write_text("\n".join(lines[1:]) + "\n")
    journal = out / "prune_drop.answers.jsonl"
    header, first, *rest = journal.read_text().splitlines()
    line = json.loads(first)
    line["answers"]["baseline"][0][0] -= 1.0
    journal.write_text("\n".join([header, json.dumps(line), *rest]) + "\n")

    notes, recorded = [], []
    progress = Progress(on_note=notes.append, on_evaluation=lambda e: recorded.append((e.task, e.variant)))
    resumed = run_prune_drop(spec, out, resume=True, loaded=loaded, progress=progress)
    assert recorded == [("lp_arc_like", None), ("lp_arc_like", 0), ("lp_arc_like", 3)]
    assert comparable(resumed) == comparable(full)
    assert notes == [
        f"--resume: reusing 0 of 3 evaluations from {out} and {len(rest)} batch(es) of journaled answers; "
        "computing 3; 3 damaged record(s) of the resume state dropped and computed again."
    ]

    # --resume on the finished run: reused as it is, nothing evaluated, and said so; its fixed cost is small:
    # the tasks (lm-eval's index and data) are not even prepared.
    import layerprobe.prune.preflight as preflight_module

    prepared = []
    monkeypatch.setattr(preflight_module, "prepare_tasks", lambda spec: prepared.append(spec) or 1 / 0)
    notes.clear(), recorded.clear()
    again = run_prune_drop(spec, out, resume=True, loaded=loaded, progress=progress)
    assert recorded == [] and comparable(again) == comparable(full) and prepared == []
    monkeypatch.undo()
    assert notes == [
        f"--resume: {out / RESULT} is already this run's finished result; reused as it is "
        "(3 evaluations, nothing recomputed)."
    ]
    # ... but not the finished result of another run (here: another --limit).
    notes = []
    other = run_prune_drop(
        dataclasses.replace(spec, limit=1),
        out,
        resume=True,
        loaded=loaded,
        progress=Progress(on_note=notes.append),
    )
    assert other.settings["limit"] == 1 and "is the finished result of a different run (limit differ)" in notes[0]


def test_a_shared_run_resumed_with_the_simple_engine_leaves_no_journal_behind(tiny_checkpoints, tmp_path):
    path = tiny_checkpoints["llama"]
    loaded = loaded_head(path)
    shared = resume_spec(path, tasks=("lp_arc_like",), engine="shared", layers="3")
    with pytest.raises(KeyboardInterrupt):
        run_prune_drop(shared, tmp_path, loaded=loaded, progress=interrupted_after(1, []))
    assert (tmp_path / "prune_drop.answers.jsonl").exists()
    run_prune_drop(resume_spec(path, tasks=("lp_arc_like",), layers="3"), tmp_path, resume=True, loaded=loaded)
    assert not list(tmp_path.glob("prune_drop.answers*")) and not list(tmp_path.glob("prune_drop.partial*"))
    # The next fresh run into that --out is not refused.
    assert run_prune_drop(shared, tmp_path, loaded=loaded).engine == "shared"


@pytest.mark.slow  # a real prune-drop, interrupted and resumed
def test_a_run_inside_the_checkpoint_leaves_its_digest_alone_and_resumes(tiny_checkpoints, tmp_path):
    checkpoint = tmp_path / "ckpt"
    shutil.copytree(tiny_checkpoints["llama"], checkpoint)
    before = files_stat_digest(str(checkpoint))
    own = [
        "out/prune_drop.partial.json",
        "out/prune_drop.partial.rank1.json",
        "out/prune_drop.partial.samples/lp_arc_like.jsonl",
        "out/prune_drop.answers.rank1.jsonl",
        "out/.layerprobe.lock",
        "out/.prune_drop.partial.json.123-0a1b2c3d.tmp",
        "out/samples/lp_arc_like.jsonl",
        "angular.json",
        "angular.png",
        "prune_drop_lp_arc_like.pdf",
    ]
    for name in own:
        (checkpoint / name).parent.mkdir(parents=True, exist_ok=True)
        (checkpoint / name).write_text("a run's own file")
    assert files_stat_digest(str(checkpoint)) == before
    (checkpoint / "tokenizer_extra.json").write_text("{}")  # a file of the checkpoint's own still counts
    assert files_stat_digest(str(checkpoint)) != before
    (checkpoint / "tokenizer_extra.json").unlink()
    for name in own:
        (checkpoint / name).unlink()

    out, loaded = checkpoint / "lp-run", loaded_head(checkpoint)
    spec = resume_spec(checkpoint, tasks=("lp_arc_like",), layers="0")
    seen = []

    def interrupting(event):
        seen.append(event)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_prune_drop(spec, out, loaded=loaded, progress=Progress(on_evaluation=interrupting))
    assert (out / PARTIAL_NAME).exists() and len(seen) == 1
    resumed = run_prune_drop(spec, out, resume=True, loaded=loaded)  # refused before: the digest saw the run's files
    assert (out / RESULT).exists() and resumed.tasks
