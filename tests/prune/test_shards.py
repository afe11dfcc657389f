"""Scale: shards merged = one run, two real ranks = one process, a killed shared-engine run resumes per batch.

The references are plain one-process runs of the same spec; results are compared as whole JSON documents
(less the `run` block: timing and host). Work done is observed through the Progress events of each run,
never through private functions.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.prune.test_drop import BATCH, TASKS_DIR, comparable, load, make_spec

from layerprobe.core.errors import LayerprobeError, ResultError
from layerprobe.core.shares import Share
from layerprobe.model.progress import Progress
from layerprobe.prune.drop import run_prune_drop
from layerprobe.prune.shards import merge_shards
from layerprobe.results import PruneDropResult
from layerprobe.results.rundir import SHARD_JSON

ROOT = Path(__file__).resolve().parents[2]
TASKS = ("lp_arc_like", "lp_pydoc_ppl")


def spec_for(path, **overrides):
    settings = dict(layers="0-3", limit=4, engine="auto")
    settings.update(overrides)
    return make_spec(path, tasks=TASKS, **settings)


def test_shard_parsing():
    assert Share.parse("1/3") == Share(1, 3)
    assert Share(1, 3).of(list(range(8))) == [1, 4, 7]
    assert sorted(sum((Share(i, 3).of(list(range(8))) for i in range(3)), [])) == list(range(8))
    for bad in ("3/3", "-1/2", "1", "a/b", "0/0"):
        with pytest.raises(LayerprobeError, match="--shard"):
            Share.parse(bad)


@pytest.mark.slow  # 5 runs of two tasks; test_cli_shard_and_merge covers the same in the default run
def test_shards_merged_equal_one_unsharded_run_and_bad_sets_are_refused(tiny_checkpoints, tmp_path):
    path = tiny_checkpoints["llama"]
    loaded = load(path)
    whole = run_prune_drop(spec_for(path), tmp_path / "whole", loaded=loaded)
    seen: dict[int, list] = {}
    for i in range(3):
        events: list = []
        progress = Progress(on_evaluation=lambda e, events=events: events.append((e.task, e.variant)))
        assert (
            run_prune_drop(spec_for(path), tmp_path / f"s{i}", loaded=loaded, shard=Share(i, 3), progress=progress)
            is None
        )
        assert (tmp_path / f"s{i}" / SHARD_JSON).exists() and not (tmp_path / f"s{i}" / "prune_drop.json").exists()
        seen[i] = sorted({v for _, v in events}, key=lambda v: -1 if v is None else v)
    # Each job scored only its own variants (baseline, 0, 1, 2, 3 dealt round-robin), every task of them.
    assert seen == {0: [None, 2], 1: [0, 3], 2: [1]}

    merged = merge_shards([tmp_path / "s2", tmp_path / "s0", tmp_path / "s1"], tmp_path / "merged")
    assert comparable(merged) == comparable(whole)
    on_disk = json.loads((tmp_path / "merged" / "prune_drop.json").read_text())
    expected = json.loads((tmp_path / "whole" / "prune_drop.json").read_text())
    on_disk.pop("run"), expected.pop("run")
    assert json.dumps(on_disk, sort_keys=True) == json.dumps(expected, sort_keys=True)
    assert comparable(
        PruneDropResult.from_dict(json.loads((tmp_path / "merged" / "prune_drop.json").read_text()))
    ) == comparable(whole)

    with pytest.raises(ResultError, match="lack variant"):
        merge_shards([tmp_path / "s0", tmp_path / "s1"], tmp_path / "m2")
    with pytest.raises(ResultError, match="in both"):
        merge_shards([tmp_path / "s0", tmp_path / "s1", tmp_path / "s2", tmp_path / "s1"], tmp_path / "m3")
    run_prune_drop(spec_for(path, limit=3), tmp_path / "other", loaded=loaded, shard=Share(1, 3))
    with pytest.raises(ResultError, match="different runs .*limit"):
        merge_shards([tmp_path / "s0", tmp_path / "other", tmp_path / "s2"], tmp_path / "m4")
    assert not any((tmp_path / m).exists() for m in ("m2", "m3", "m4"))


def test_a_shared_engine_run_killed_in_its_baseline_pass_resumes_recomputing_only_the_batch_in_flight(
    tiny_checkpoints, tmp_path
):
    path = tiny_checkpoints["llama"]
    loaded = load(path)
    # The plain shared path journals per batch; prefix-reuse groups are not journaled yet (see the report).
    spec = make_spec(
        path, tasks=("lp_arc_like",), layers="0-3", limit=3, batch_size=2, engine="shared", prefix_reuse=False
    )
    L = 4

    def batches_saved(out: Path) -> int:
        journal = out / "prune_drop.answers.jsonl"
        return len(journal.read_text().splitlines()) - 1 if journal.exists() else 0

    # The uninterrupted run, its block passes grouped by the batch they belong to (batches saved so far).
    out_full = tmp_path / "full"
    rows_by_batch: dict[int, int] = {}

    def tally(event) -> None:
        batch = batches_saved(out_full)
        rows_by_batch[batch] = rows_by_batch.get(batch, 0) + event.rows

    full = run_prune_drop(spec, out_full, loaded=loaded, progress=Progress(on_block=tally))
    assert len(rows_by_batch) >= 4  # 12 requests, 2 rows a batch: enough batches to kill one mid-way
    assert not (out_full / "prune_drop.answers.jsonl").exists()  # removed once the result is written

    # Killed during the third batch of the baseline evaluation (after a few of its block passes).
    out = tmp_path / "killed"
    passes_in_third = []

    def kill(event) -> None:
        if batches_saved(out) == 2:
            passes_in_third.append(event)
            if len(passes_in_third) == 3:
                raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_prune_drop(spec, out, loaded=loaded, progress=Progress(on_block=kill))
    assert batches_saved(out) == 2 and not (out / "prune_drop.json").exists()
    with pytest.raises(ResultError, match="unfinished prune-drop run"):  # no silent restart without --resume
        run_prune_drop(spec, out, loaded=loaded)

    resumed_rows = []
    resumed = run_prune_drop(
        spec, out, resume=True, loaded=loaded, progress=Progress(on_block=lambda e: resumed_rows.append(e.rows))
    )
    assert comparable(resumed) == comparable(full)
    # Every batch but the two saved ones is computed again, the one in flight included; the engine's
    # one-row probe of the blocks' output (L passes, made with the first batch it computes) moves along.
    assert sum(resumed_rows) == sum(rows_by_batch.values()) - rows_by_batch[0] - rows_by_batch[1] + L
    assert not list(out.glob("prune_drop.partial*")) and not list(out.glob("prune_drop.answers*"))


# ------------------------------------------------------------------------------------- two real ranks
RANK_SCRIPT = """
import json, os, sys
from pathlib import Path
sys.path.insert(0, {tests!r})
from tests.prune.test_drop import make_spec
from layerprobe.measure.angular import run_angular
from layerprobe.model.progress import Progress
from layerprobe.prune.drop import run_prune_drop
from layerprobe.core import BUILTIN_CORPUS, AngularSpec, CorpusSpec, ModelSpec
from tests.prune.test_shards import angular_json
rank = int(os.environ["RANK"])
variants, tokens, stage = [], [], [None]
spec = make_spec({model!r}, tasks={tasks!r}, layers="0-3", limit=4, engine={engine!r})
result = run_prune_drop(spec, Path({out!r}), progress=Progress(on_evaluation=lambda e: variants.append(e.variant)))
angular = run_angular(
    AngularSpec(ModelSpec({model!r}, device="cpu"), CorpusSpec(BUILTIN_CORPUS, None, "train", "text", 2048, 64),
                batch_size=4),
    Progress(on_stage=lambda name, *_: stage.__setitem__(0, name),
             on_advance=lambda n: tokens.append(n) if stage[0] == "Measuring" else None),
)
Path({out!r}, f"rank{{rank}}.json").write_text(json.dumps(
    {{"variants": variants, "tokens": sum(tokens), "angular": angular_json(angular),
      "prune": result.to_dict()["tasks"]}}
))
"""


def angular_json(result) -> str:
    """An angular result as JSON text (NaN included) without timing: comparable bit for bit."""
    data = result.to_dict()
    data.pop("run"), data.pop("tokens_per_second")
    return json.dumps(data, sort_keys=True)


def _env() -> dict[str, str]:
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    return env


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["shared", "simple"])
def test_two_cpu_ranks_equal_one_process_each_doing_a_share(tiny_checkpoints, tmp_path, engine):
    from layerprobe.core import BUILTIN_CORPUS, AngularSpec, CorpusSpec, ModelSpec
    from layerprobe.measure.angular import run_angular

    path = str(tiny_checkpoints["llama"])
    out = tmp_path / "ranks"
    script = tmp_path / "ranks.py"
    script.write_text(
        RANK_SCRIPT.format(tests=str(ROOT / "tests"), model=path, tasks=TASKS, engine=engine, out=str(out))
    )
    launched = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", str(script)],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert launched.returncode == 0, launched.stderr[-3000:]
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]

    one = run_prune_drop(spec_for(path, engine=engine), tmp_path / "one", loaded=load(path))
    written = json.loads((out / "prune_drop.json").read_text())
    assert written["tasks"] == one.to_dict()["tasks"] == ranks[0]["prune"] == ranks[1]["prune"]
    assert written["engine"] == one.engine
    # Variants dealt round-robin: rank 0 the baseline, 1 and 3; rank 1 blocks 0 and 2 (every task of each).
    assert sorted(set(ranks[0]["variants"]), key=lambda v: -1 if v is None else v) == [None, 1, 3]
    assert sorted(set(ranks[1]["variants"])) == [0, 2]
    assert not list(out.glob("prune_drop.partial*")) and not list(out.glob("prune_drop.answers*"))

    angular = run_angular(
        AngularSpec(
            ModelSpec(path, device="cpu"), CorpusSpec(BUILTIN_CORPUS, None, "train", "text", 2048, 64), batch_size=4
        )
    )
    # Bit-identical (matrix, stderrs, counts): the batches' fp64 totals are added in one-process order.
    assert ranks[0]["angular"] == ranks[1]["angular"] == angular_json(angular)
    # Each rank measured its share of the batches: 32 windows of 64 tokens, batches of 4, dealt in turn.
    assert ranks[0]["tokens"] == ranks[1]["tokens"] == 1024


@pytest.mark.slow
def test_accelerate_launch_angular_cli_on_two_cpu_ranks_writes_one_result(tiny_checkpoints, tmp_path):
    from layerprobe.core import BUILTIN_CORPUS, AngularSpec, CorpusSpec, ModelSpec
    from layerprobe.measure.angular import run_angular

    path = str(tiny_checkpoints["llama"])
    launcher = Path(sys.executable).parent / "accelerate"
    command = [
        str(launcher), "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
        "--mixed_precision", "no", "--dynamo_backend", "no",
        "-m", "layerprobe", "angular", path, "--dataset", BUILTIN_CORPUS, "--split", "train",
        "--tokens", "2048", "--seq-len", "64", "--batch-size", "4", "--device", "cpu", "--out", str(tmp_path / "a"),
    ]  # fmt: skip
    launched = subprocess.run(command, env=_env(), capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert launched.returncode == 0, launched.stderr[-3000:]
    assert launched.stdout.count("wrote ") == 1  # only rank 0 reports
    written = json.loads((tmp_path / "a" / "angular.json").read_text())
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["angular.json", "angular.pdf", "angular.png"]
    one = run_angular(
        AngularSpec(
            ModelSpec(path, device="cpu"), CorpusSpec(BUILTIN_CORPUS, None, "train", "text", 2048, 64), batch_size=4
        )
    )
    assert written["distance"] == one.distance
    assert json.dumps(written["distance_stderr"]) == json.dumps(one.distance_stderr)
    assert written["data"]["positions_averaged"] == one.data["positions_averaged"] == 2048


def test_cli_shard_and_merge(tiny_checkpoints, tmp_path):
    from typer.testing import CliRunner

    from layerprobe.cli.app import app

    path = str(tiny_checkpoints["llama"])
    common = ["prune-drop", path, "--task", "lp_arc_like", "--include-path", str(TASKS_DIR), "--layers", "0,3"]
    common += ["--limit", "2", "--batch-size", str(BATCH), "--device", "cpu", "--quiet"]
    runner = CliRunner()
    for i in range(2):
        done = runner.invoke(app, [*common, "--shard", f"{i}/2", "--out", str(tmp_path / f"s{i}")])
        assert done.exit_code == 0, done.output
        assert "wrote shard" in done.output
    bad = runner.invoke(app, [*common, "--shard", "2/2", "--out", str(tmp_path / "bad")])
    assert bad.exit_code == 2 and "--shard '2/2'" in bad.output
    merged = runner.invoke(app, ["merge", str(tmp_path / "s0"), str(tmp_path / "s1"), "--out", str(tmp_path / "m")])
    assert merged.exit_code == 0, merged.output
    whole = runner.invoke(app, [*common, "--out", str(tmp_path / "w")])
    assert whole.exit_code == 0, whole.output
    a, b = (json.loads((tmp_path / d / "prune_drop.json").read_text()) for d in ("m", "w"))
    assert {k: v for k, v in a.items() if k != "run"} == {k: v for k, v in b.items() if k != "run"}
    missing = runner.invoke(app, ["merge", str(tmp_path / "s0"), "--out", str(tmp_path / "m2")])
    assert missing.exit_code == 2 and "lack variant" in missing.output
