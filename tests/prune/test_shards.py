"""Shards merged equal one unsharded run; sets of shards that do not make one run are refused.

The reference is a plain one-process run of the same spec; results are compared as whole JSON documents
(less the `run` block: timing and host). Work done is observed through the Progress events of each run.
"""

from __future__ import annotations

import json

import pytest
from factories import SHARD_SETTINGS, loaded_head, prune_spec
from watching import comparable

from layerprobe.core.errors import ResultError
from layerprobe.core.shares import Share
from layerprobe.model.progress import Progress
from layerprobe.prune.drop import run_prune_drop
from layerprobe.prune.shards import merge_shards
from layerprobe.results import PruneDropResult
from layerprobe.results.rundir import SHARD_JSON


def spec_for(path, **overrides):
    return prune_spec(path, **{**SHARD_SETTINGS, "engine": "auto", **overrides})


@pytest.mark.slow  # 5 runs of two tasks; tests/cli/test_merge.py covers the same in the default run
def test_shards_merged_equal_one_unsharded_run_and_bad_sets_are_refused(tiny_checkpoints, tmp_path):
    path = tiny_checkpoints["llama"]
    loaded = loaded_head(path)
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


def test_shard_0_of_1_writes_its_shard_and_merge_makes_the_result(tiny_checkpoints, tmp_path):
    path = tiny_checkpoints["llama"]
    loaded = loaded_head(path)
    spec = spec_for(path, tasks=("lp_arc_like",), layers="0,3", limit=2)
    assert run_prune_drop(spec, tmp_path / "s0", loaded=loaded, shard=Share(0, 1)) is None
    assert (tmp_path / "s0" / SHARD_JSON).exists() and not (tmp_path / "s0" / "prune_drop.json").exists()
    whole = run_prune_drop(spec, tmp_path / "whole", loaded=loaded)
    assert comparable(merge_shards([tmp_path / "s0"], tmp_path / "merged")) == comparable(whole)


@pytest.mark.slow  # five runs of one task
def test_more_shards_than_variants_a_baseline_only_and_an_empty_shard_merge(tiny_checkpoints, tmp_path):
    path = tiny_checkpoints["llama"]
    loaded = loaded_head(path)
    spec = spec_for(path, tasks=("lp_arc_like",), layers="0,3", limit=2)
    for i in range(4):  # variants baseline, 0, 3 over 4 shards: the baseline alone, 0, 3, and nothing
        assert run_prune_drop(spec, tmp_path / f"s{i}", loaded=loaded, shard=Share(i, 4)) is None
    empty = json.loads((tmp_path / "s3" / SHARD_JSON).read_text())
    assert empty["variants"] == [] and empty["done"] == {"lp_arc_like": {}} and empty["samples"] == {"lp_arc_like": []}
    whole = run_prune_drop(spec, tmp_path / "whole", loaded=loaded)
    merged = merge_shards([tmp_path / f"s{i}" for i in (3, 1, 0, 2)], tmp_path / "merged")
    assert comparable(merged) == comparable(whole)
