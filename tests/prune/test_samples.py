"""Per-document rows of a prune-drop run: written before each evaluation is recorded, consistent on resume."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from factories import loaded_head, prune_spec

from layerprobe.model.progress import Progress
from layerprobe.prune.drop import run_prune_drop
from layerprobe.prune.samples import SampleLog
from layerprobe.prune.state import PARTIAL_NAME, PruneState
from layerprobe.results.evaluation import Evaluation, MetricScore
from layerprobe.results.rundir import PRUNE_DROP_PARTIAL_SAMPLES as PARTIAL_DIR
from layerprobe.results.rundir import SAMPLES_DIR
from layerprobe.results.rundir import sample_name as file_name


def rows(variant, n=3, value=1.0):
    return [{"variant": variant, "task": "t", "doc_id": i, "acc": value} for i in range(n)]


def test_append_read_keep_only_and_finish(tmp_path):
    log = SampleLog.open(tmp_path, resume=False)
    log.append("a/b", rows(None))
    log.append("a/b", rows(2, value=0.0))
    log.append("a/b", rows(0))
    assert (tmp_path / PARTIAL_DIR / "a_b.jsonl").exists() and file_name("a/b") == "a_b.jsonl"
    assert set(log.read("a/b")) == {None, 2, 0}
    # A variant evaluated again after a crash: its last block of rows wins, none is counted twice.
    log.append("a/b", rows(2, value=0.5))
    assert log.read("a/b")[2] == rows(2, value=0.5)
    assert log.keep_only("a/b", {None, 2}) == {None, 2}
    assert set(log.read("a/b")) == {None, 2}
    final = log.finish(["a/b"], keep=True)
    written = [json.loads(line) for line in (final / "a_b.jsonl").read_text().splitlines()]
    assert written == rows(None) + rows(2, value=0.5)  # baseline first, then blocks ascending
    assert not (tmp_path / PARTIAL_DIR).exists() and final == tmp_path / SAMPLES_DIR


def test_a_line_cut_by_a_crash_is_ignored_and_a_fresh_run_starts_clean(tmp_path):
    log = SampleLog.open(tmp_path, resume=False)
    log.append("t", rows(None))
    with open(tmp_path / PARTIAL_DIR / "t.jsonl", "a") as handle:
        handle.write('{"variant": 1, "task": "t", "doc_')
    assert set(log.read("t")) == {None}
    assert set(SampleLog.open(tmp_path, resume=True).read("t")) == {None}
    assert SampleLog.open(tmp_path, resume=False).read("t") == {}
    assert not SampleLog(tmp_path).finish(["t"], keep=False) and not (tmp_path / PARTIAL_DIR).exists()


# ----------------------------------------------------------------------------- resume, end to end


def spec(path, **overrides):
    settings = dict(tasks=("lp_arc_like", "lp_pydoc_ppl"), limit=4, num_fewshot=None, log_samples=True)
    return prune_spec(path, **{**settings, **overrides})


def samples_of(out: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted((out / SAMPLES_DIR).glob("*.jsonl"))}


def tasks_of(result) -> dict:
    return result.to_dict()["tasks"]


def test_resume_keeps_rows_and_scores_of_the_same_evaluations(tiny_checkpoints, tmp_path):
    path = tiny_checkpoints["llama"]
    loaded = loaded_head(path)
    full = run_prune_drop(spec(path), tmp_path / "full", loaded=loaded)
    assert sorted(samples_of(tmp_path / "full")) == ["lp_arc_like.jsonl", "lp_pydoc_ppl.jsonl"]

    out, count = tmp_path / "resumed", {"n": 0}

    def stop_after(k):
        def advance(amount):
            count["n"] += amount
            if count["n"] == k:
                raise KeyboardInterrupt

        return Progress(on_advance=advance)

    with pytest.raises(KeyboardInterrupt):
        run_prune_drop(spec(path), out, loaded=loaded, progress=stop_after(3))
    done = json.loads((out / PARTIAL_NAME).read_text())["done"]
    assert sum(len(v) for v in done.values()) == 3
    # A crash between writing rows and recording the evaluation: rows of a variant the state lacks.
    partial = out / PARTIAL_DIR / "lp_arc_like.jsonl"
    with open(partial, "a") as handle:
        handle.write(json.dumps({"variant": 3, "task": "lp_arc_like", "doc_id": 0, "acc": 9.0, "acc_norm": 9.0}) + "\n")
    # And a recorded evaluation whose rows are gone: it is evaluated again rather than left unpaired.
    assert set(done["lp_pydoc_ppl"]) == {"baseline"}
    (out / PARTIAL_DIR / "lp_pydoc_ppl.jsonl").write_text("")
    count["n"] = 0
    resumed = run_prune_drop(spec(path), out, resume=True, loaded=loaded, progress=stop_after(-1))
    assert count["n"] == 6 - 3 + 1  # what was missing, plus the recorded baseline that had no rows
    assert tasks_of(resumed) == tasks_of(full)
    assert samples_of(out) == samples_of(tmp_path / "full")
    assert not (out / PARTIAL_DIR).exists() and not (out / PARTIAL_NAME).exists()


def test_without_log_samples_nothing_is_left_but_paired_fields_are_there(tiny_checkpoints, tmp_path):
    result = run_prune_drop(spec(tiny_checkpoints["llama"], log_samples=False, tasks=("lp_arc_like",)), tmp_path)
    assert not (tmp_path / SAMPLES_DIR).exists() and not (tmp_path / PARTIAL_DIR).exists()
    acc = result.tasks["lp_arc_like"].metrics["acc"]
    assert acc.paired and len(acc.delta_stderr) == 2 and acc.delta_method == "paired_mean"


def test_a_rerun_without_log_samples_removes_only_the_earlier_runs_sample_logs(tmp_path):
    earlier = SampleLog.open(tmp_path, resume=False)
    earlier.append("old/task", rows(1))
    earlier.finish(["old/task"], keep=True)
    ours = tmp_path / SAMPLES_DIR / "old_task.jsonl"
    user_lines = tmp_path / SAMPLES_DIR / "my_notes.jsonl"  # not a row log: the user's own file
    user_lines.write_text('{"note": "keep me"}\n')
    (tmp_path / SAMPLES_DIR / "README.txt").write_text("mine")
    assert ours.exists()

    log = SampleLog.open(tmp_path, resume=False)
    log.append("t", rows(None))
    assert log.finish(["t"], keep=False) is None
    assert not ours.exists() and log.stale_removed == [ours]
    assert user_lines.read_text() == '{"note": "keep me"}\n' and (tmp_path / SAMPLES_DIR / "README.txt").exists()

    # With --log-samples the earlier run's other tasks go as well (the user's files stay); alone, the folder goes.
    earlier = SampleLog.open(tmp_path, resume=False)
    earlier.append("old/task", rows(1))
    earlier.finish(["old/task"], keep=True)
    log = SampleLog.open(tmp_path, resume=False)
    log.append("t", rows(None))
    log.finish(["t"], keep=True)
    assert not ours.exists() and log.stale_removed == [ours] and user_lines.exists()
    assert (tmp_path / SAMPLES_DIR / "t.jsonl").exists()
    user_lines.unlink()
    (tmp_path / SAMPLES_DIR / "README.txt").unlink()
    log = SampleLog.open(tmp_path, resume=False)
    log.finish(["t"], keep=False)
    assert not (tmp_path / SAMPLES_DIR).exists() and log.stale_removed == [tmp_path / SAMPLES_DIR / "t.jsonl"]
    # Another process of a launch never touches samples/.
    SampleLog(tmp_path, ".rank1").finish([], keep=False, main=False)


@pytest.mark.parametrize("damage", ["deleted row", "edited row", "added row", "wrong shape", "bytes"])
def test_rows_that_no_longer_match_their_checksum_send_their_evaluation_back(tmp_path, damage):
    evaluation = Evaluation({"acc": MetricScore(0.5, 0.1, True, 3)}, 0, 3, "simple")
    state = PruneState.open(tmp_path, {"model": "m"}, resume=False)
    log = SampleLog.open(tmp_path, resume=False)
    for variant in (None, 2):
        log.append("t", rows(variant))
        state.record("t", variant, evaluation, rows(variant))
    path = tmp_path / PARTIAL_DIR / "t.jsonl"
    lines = path.read_text().splitlines()
    assert len(lines) == 6
    changed = {
        "deleted row": lines[:4] + lines[5:],
        "edited row": lines[:4] + [lines[4].replace("1.0", "0.0")] + lines[5:],
        "added row": lines + [json.dumps({"variant": 2, "task": "t", "doc_id": 9, "acc": 1.0})],
        "wrong shape": lines[:4] + ['{"variant": "two", "doc_id": 1}'] + lines[5:],
        "bytes": lines[:4] + ["\udcff\x00garbage"] + lines[5:],
    }[damage]
    path.write_text("\n".join(changed) + "\n", errors="surrogateescape")

    resumed = PruneState.open(tmp_path, {"model": "m"}, resume=True)
    assert resumed.damaged == 0 and resumed.variants("t") == [None, 2]
    assert SampleLog.open(tmp_path, resume=True).reconcile(resumed) == 1
    assert resumed.variants("t") == [None]  # block 2 is evaluated again; the baseline's rows are intact
    assert set(SampleLog(tmp_path).read("t")) == {None}
