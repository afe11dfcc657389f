"""`prune-drop --shard i/n` and `layerprobe merge`: shards merged equal the whole run."""

from __future__ import annotations

import json

import pytest
from factories import PRUNE_SETTINGS, TASKS_DIR
from typer.testing import CliRunner

from layerprobe.cli.app import app


@pytest.mark.slow  # over 2.5 s on 2 cores: the default tier stays under 3 minutes
def test_cli_shard_and_merge(tiny_checkpoints, tmp_path):
    path = str(tiny_checkpoints["llama"])
    common = ["prune-drop", path, "--task", "lp_arc_like", "--include-path", str(TASKS_DIR), "--layers", "0,3"]
    common += ["--limit", "2", "--batch-size", str(PRUNE_SETTINGS["batch_size"]), "--device", "cpu", "--quiet"]
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


@pytest.fixture(scope="module")
def two_shards(tiny_checkpoints, tmp_path_factory):
    """Shards 0/2 (baseline, block 3) and 1/2 (block 0) of one real run: one task, four documents."""
    from factories import loaded_head, prune_spec

    from layerprobe.core.shares import Share
    from layerprobe.prune.drop import run_prune_drop

    path = tiny_checkpoints["llama"]
    loaded, root = loaded_head(path), tmp_path_factory.mktemp("shards")
    spec = prune_spec(path, tasks=("lp_arc_like",), layers="0,3", limit=4, engine="auto")
    for i in range(2):
        run_prune_drop(spec, root / f"s{i}", loaded=loaded, shard=Share(i, 2))
    return {i: json.loads((root / f"s{i}" / "prune_drop.shard.json").read_text()) for i in range(2)}


def _rows(shard, variant):
    return [row for row in shard["samples"]["lp_arc_like"] if row["variant"] == variant]


def _edit(case, shards):
    s0, s1 = shards[0], shards[1]
    rows = s0["samples"]["lp_arc_like"]
    if case == "no samples":
        s0["samples"] = {}
    elif case == "a garbage row":
        rows.append({"variant": None, "task": "lp_arc_like", "doc_id": 7, "acc": "garbage"})
    elif case == "a row of no variant":
        rows.append({"task": "lp_arc_like", "doc_id": 0})
    elif case == "3 rows removed":
        kept = _rows(s0, None)[3:]
        s0["samples"]["lp_arc_like"] = kept + _rows(s0, 3)
    elif case == "a task without results":
        s0["done"] = {}
    elif case == "variant 99":
        s0["variants"].append("99")
        s0["done"]["lp_arc_like"]["99"] = s0["done"]["lp_arc_like"]["3"]
    elif case == "block 99 in the settings":
        for shard in (s0, s1):
            shard["settings"]["layers"] = [0, 3, 99]
    elif case == "another shard's variant":
        s0["variants"].append("0")
        s0["done"]["lp_arc_like"]["0"] = s1["done"]["lp_arc_like"]["0"]
        rows.extend(_rows(s1, 0))
    elif case == "a result of a variant it does not list":
        s0["done"]["lp_arc_like"]["0"] = s1["done"]["lp_arc_like"]["0"]
    elif case == "other documents":
        for row in _rows(s1, 0):
            row["doc_id"] += 100
    return s0, s1


MERGE_CASES = [
    ("no samples", "s0/prune_drop.shard.json: it has no per-document rows of task lp_arc_like"),
    ("a garbage row", "per-document row 9 of task lp_arc_like is not one layerprobe wrote (acc is 'garbage')"),
    ("a row of no variant", "per-document row 9 of task lp_arc_like is not one layerprobe wrote (variant 'absent')"),
    ("3 rows removed", "task lp_arc_like, variant baseline has 1 per-document rows; its result says it scored 4"),
    ("a task without results", "s0/prune_drop.shard.json: task lp_arc_like is in its settings but has no results"),
    ("variant 99", "it carries variant(s) 99, which are not shard 0/2's (baseline, 3)"),
    ("block 99 in the settings", "its settings name block 99, and the model has 4 blocks (0-3)"),
    ("another shard's variant", "it carries variant(s) 0, which are not shard 0/2's (baseline, 3)"),
    ("a result of a variant it does not list", "task lp_arc_like has results of variant(s) 0, which are not shard"),
    ("other documents", "s1/prune_drop.shard.json: task lp_arc_like, variant 0 has per-document rows of other"),
]


@pytest.mark.slow  # two real shards, then ten merges
def test_merge_validates_every_shard_and_names_it(two_shards, tmp_path):
    runner = CliRunner()
    for case, says in MERGE_CASES:
        s0, s1 = _edit(case, {i: json.loads(json.dumps(s)) for i, s in two_shards.items()})
        for i, shard in enumerate((s0, s1)):
            (tmp_path / case / f"s{i}").mkdir(parents=True)
            (tmp_path / case / f"s{i}" / "prune_drop.shard.json").write_text(json.dumps(shard))
        for order in ((0, 1), (1, 0)):  # the answer does not depend on the order the shards are given
            merged = runner.invoke(
                app, ["merge", *(str(tmp_path / case / f"s{i}") for i in order), "--out", str(tmp_path / "m")]
            )
            flat = " ".join(merged.output.split())
            assert merged.exit_code == 2, (case, merged.output)
            assert says in flat, (case, flat)
            assert "Traceback" not in merged.output and "Run that shard again" in flat
            assert not (tmp_path / "m").exists()
    for i, shard in two_shards.items():  # the shards as written merge
        (tmp_path / "ok" / f"s{i}").mkdir(parents=True)
        (tmp_path / "ok" / f"s{i}" / "prune_drop.shard.json").write_text(json.dumps(shard))
    merged = runner.invoke(
        app, ["merge", str(tmp_path / "ok" / "s0"), str(tmp_path / "ok" / "s1"), "--out", str(tmp_path / "m")]
    )
    assert merged.exit_code == 0, merged.output
