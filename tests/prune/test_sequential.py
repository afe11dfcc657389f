"""prune-drop --precision: each variant's anytime interval is the confidence sequence of its own paired differences.

The reference is a full (non-sequential) run of the same model and tasks with --log-samples: its
per-document values, taken in the seeded order `stats.scoring_order` gives, are what a sequential run
must have seen. From them the test computes `stats.confidence_interval` itself and checks every
variant's interval, its document count and why it stopped (and that it had not stopped one round
earlier). Two-shot prompts make the check bite: a subset scored with other few-shot examples than the
full run gives other values. Resume after a kill and the two engines must give the identical result.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
from factories import TASKS_DIR, prune_spec

import layerprobe.evaluate.harness as harness
from layerprobe.core import LayerprobeError, Share, TaskError
from layerprobe.evaluate.tasks import build_tasks
from layerprobe.prune.drop import run_prune_drop
from layerprobe.prune.sequential import longer_baseline, with_baseline
from layerprobe.prune.shards import merge_shards
from layerprobe.results import PruneDropResult
from layerprobe.stats.sequential import confidence_interval, scoring_order, stop_reason

ROOT = Path(__file__).resolve().parents[2]
TASKS = ("lp_mmlu", "lp_arc_like")  # a size-weighted group of two subjects (30 documents) and a task (15)
SEQUENTIAL = dict(tasks=TASKS, layers="0-3", limit=None, num_fewshot=2, precision=0.2, round_size=4)


def sequential_spec(path, **settings):
    return prune_spec(path, **{**SEQUENTIAL, **settings})


def documents_in_order(task: str, seed: int) -> list[tuple[str, int]]:
    """(leaf task, doc id) in the order a sequential run scores them: leaves as lm-eval lists them, ids ascending."""
    task_set = build_tasks([task], str(TASKS_DIR), 2, seed)
    leaves = task_set.members[task]
    sizes = {leaf: len(task_set.tasks[leaf].eval_docs) for leaf in leaves}
    documents = [(leaf, i) for leaf in leaves for i in range(sizes[leaf])]
    return [documents[i] for i in scoring_order(len(documents), seed)]


def full_values(out_dir, task: str) -> dict:
    """variant → metric → (leaf, doc id) → value, from a full run's samples/<task>.jsonl."""
    values: dict = defaultdict(lambda: defaultdict(dict))
    for line in (out_dir / "samples" / f"{task}.jsonl").read_text().splitlines():
        row = json.loads(line)
        for key, value in row.items():
            if key not in ("variant", "task", "doc_id"):
                values[row["variant"]][key][(row["task"], row["doc_id"])] = float(value)
    return values


@pytest.fixture(scope="module")
def runs(tiny_checkpoints, tmp_path_factory):
    """The full run (with samples) and the sequential run with either engine, of one tiny checkpoint."""
    path = tiny_checkpoints["llama"]
    root = tmp_path_factory.mktemp("sequential")
    full = run_prune_drop(
        prune_spec(path, tasks=TASKS, layers="0-3", limit=None, num_fewshot=2, log_samples=True), root / "full"
    )
    simple = run_prune_drop(sequential_spec(path), root / "simple")
    shared = run_prune_drop(sequential_spec(path, engine="shared"), root / "shared")
    return {"root": root, "full": full, "simple": simple, "shared": shared, "path": path}


@pytest.mark.slow
def test_every_interval_is_the_confidence_sequence_of_the_full_runs_paired_differences(runs):
    result, precision, size = runs["simple"], SEQUENTIAL["precision"], SEQUENTIAL["round_size"]
    stops = set()
    for task in TASKS:
        order = documents_in_order(task, result.settings["seed"])
        population = len(order)
        values = full_values(runs["root"] / "full", task)
        task_drop = result.tasks[task]
        scored = []
        for name, metric in task_drop.metrics.items():
            base = np.array([values[None][name][d] for d in order])
            assert metric.items is not None and metric.stop is not None and metric.delta_cs95 is not None
            for i, layer in enumerate(metric.layers):
                items, stop = metric.items[i], metric.stop[i]
                diffs = np.array([values[layer][name][d] for d in order]) - base
                low, high = confidence_interval(diffs[None, :items], low_bound=-1, high_bound=1, population=population)
                assert metric.delta_cs95[i] == pytest.approx([low[0], high[0]], abs=1e-12), (task, name, layer)
                assert metric.delta[i] == pytest.approx(diffs[:items].mean(), abs=1e-12)
                assert metric.significant[i] == (low[0] > 0 or high[0] < 0)
                assert stop == stop_reason((low[0], high[0]), half_width=precision, seen=items, population=population)
                assert items % size == 0 or items == population
                stops.add(stop)
                scored.append((layer, items))
        # a variant stops when all its metrics have: it had not one round earlier, and its metrics agree on items
        for layer in set(l for l, _ in scored):
            (items,) = {k for l, k in scored if l == layer}
            if items > size:
                earlier = []
                for name in task_drop.metrics:
                    base = np.array([values[None][name][d] for d in order[: items - size]])
                    diffs = np.array([values[layer][name][d] for d in order[: items - size]]) - base
                    lo, hi = confidence_interval(diffs[None], low_bound=-1, high_bound=1, population=population)
                    earlier.append(
                        stop_reason((lo[0], hi[0]), half_width=precision, seen=items - size, population=population)
                    )
                assert not all(earlier), (task, layer)
        # the baseline is scored on every document any variant used, and only those
        most = max(k for _, k in scored)
        primary = task_drop.primary_metric
        assert task_drop.samples == most
        assert task_drop.metrics[primary].baseline == pytest.approx(
            np.mean([values[None][primary][d] for d in order[:most]]), abs=1e-12
        )
    assert result.settings["precision"] == precision and result.settings["round_size"] == size
    assert "precision" in stops  # the run stopped early somewhere (not only on exhaustion)


@pytest.mark.slow
def test_both_engines_reach_the_same_sequential_result(runs):
    simple, shared = runs["simple"], runs["shared"]
    assert shared.engine == "shared" and simple.engine == "simple"
    for task in TASKS:
        for name, metric in simple.tasks[task].metrics.items():
            other = shared.tasks[task].metrics[name]
            assert (other.items, other.stop, other.delta_cs95) == (metric.items, metric.stop, metric.delta_cs95)
            assert other.pruned == metric.pruned and other.baseline == metric.baseline


@pytest.mark.slow
def test_a_killed_sequential_run_resumes_where_it_was_and_reaches_the_same_result(runs, monkeypatch):
    out = runs["root"] / "killed"
    calls = {"n": 0}
    original = harness.score_documents

    def dies_midway(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 12:  # inside the third round of the first task
            raise KeyboardInterrupt
        return original(*args, **kwargs)

    monkeypatch.setattr(harness, "score_documents", dies_midway)
    with pytest.raises(KeyboardInterrupt):
        run_prune_drop(sequential_spec(runs["path"]), out)
    assert any(out.glob("prune_drop.partial.samples/*.rounds.jsonl"))
    calls["n"] = -(10**6)  # no second kill
    resumed = run_prune_drop(sequential_spec(runs["path"]), out, resume=True)
    assert resumed.to_dict()["tasks"] == runs["simple"].to_dict()["tasks"]
    assert calls["n"] + 10**6 < total_calls(runs["simple"]) - 5  # the two logged rounds were replayed, not scored
    assert not (out / "prune_drop.partial.samples").exists() and not (out / "prune_drop.partial.json").exists()


def total_calls(result: PruneDropResult) -> int:
    """How many (round, variant) scorings a sequential result took, baseline included."""
    size = result.settings["round_size"]
    total = 0
    for task in result.tasks.values():
        metric = next(iter(task.metrics.values()))
        rounds = [-(-k // size) for k in metric.items]
        total += max(rounds) + sum(rounds)
    return total


@pytest.mark.slow
def test_a_run_without_precision_writes_no_sequential_fields(runs):
    data = runs["full"].to_dict()
    assert data["schema"] == "layerprobe/prune-drop@2"
    assert "precision" not in data["settings"] and "round_size" not in data["settings"]
    for task in data["tasks"].values():
        for metric in task["metrics"].values():
            assert metric["items"] is None and metric["stop"] is None and metric["delta_cs95"] is None


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (dict(precision=0.0), "--precision must lie in (0, 1)"),
        (dict(precision=1.5), "--precision must lie in (0, 1)"),
        (dict(round_size=0), "--round-size must be a positive integer"),
        (dict(tasks=("lp_arc_like", "squad")), "squad has no such metric"),
    ],
)
def test_bad_sequential_options_are_one_line(tiny_checkpoints, settings, message):
    with pytest.raises(LayerprobeError, match=message.replace("(", r"\(").replace(")", r"\)")):
        sequential_spec(tiny_checkpoints["llama"], **settings)


def test_a_perplexity_task_is_refused_before_any_weight_loads(tiny_checkpoints, tmp_path, monkeypatch):
    import layerprobe.prune.drop as drop

    monkeypatch.setattr(drop, "load_model", lambda *a, **k: pytest.fail("weights loaded"))
    with pytest.raises(TaskError, match="of task lp_pydoc_ppl is aggregated by"):
        run_prune_drop(sequential_spec(tiny_checkpoints["llama"], tasks=("lp_pydoc_ppl",)), tmp_path)


@pytest.mark.slow
def test_shards_of_a_sequential_run_merge_into_the_one_process_result(runs):
    shards = []
    for i in range(2):
        out = runs["root"] / f"shard{i}"
        assert run_prune_drop(sequential_spec(runs["path"]), out, shard=Share.parse(f"{i}/2")) is None
        shards.append(out)
    merged = merge_shards(shards, runs["root"] / "merged")
    assert merged.to_dict()["tasks"] == runs["simple"].to_dict()["tasks"]


@pytest.mark.slow
def test_two_ranks_of_a_sequential_run_write_the_one_process_result(runs, tmp_path):
    out = tmp_path / "ranks"
    script = tmp_path / "ranks.py"
    script.write_text(
        RANK_SCRIPT.format(tests=str(ROOT / "tests"), model=str(runs["path"]), settings=SEQUENTIAL, out=str(out))
    )
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    launched = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", str(script)],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert launched.returncode == 0, launched.stderr[-3000:]
    written = json.loads((out / "prune_drop.json").read_text())
    assert written["tasks"] == runs["simple"].to_dict()["tasks"]


RANK_SCRIPT = """
import sys
from pathlib import Path
sys.path.insert(0, {tests!r})
sys.path.insert(0, {tests!r} + "/prune")
from test_sequential import sequential_spec
from layerprobe.prune.drop import run_prune_drop
from layerprobe.prune.sequential import longer_baseline, with_baseline
from layerprobe.prune.shards import merge_shards
run_prune_drop(sequential_spec({model!r}), Path({out!r}))
"""


def test_joining_shares_keeps_the_baseline_scored_on_the_most_documents():
    short, long = {"samples": 8}, {"samples": 12}
    rows = [{"variant": None, "doc_id": 0}, {"variant": 1, "doc_id": 0}]
    kept, kept_rows = longer_baseline({"baseline": long}, {"baseline": short, "1": {"samples": 8}}, rows)
    assert kept == {"1": {"samples": 8}} and kept_rows == rows[1:]
    assert longer_baseline({"baseline": short}, {"baseline": long}, rows) == ({"baseline": long}, rows)
    assert (
        with_baseline([None, 2, 0]) == [None, 2, 0] and with_baseline([3]) == [None, 3] and with_baseline([None]) == []
    )
