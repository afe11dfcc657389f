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
