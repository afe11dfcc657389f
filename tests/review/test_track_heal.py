"""`track` follows heal.json across runs: the healed model's held-out KL and the recovery, per run, read back."""

from __future__ import annotations

import json

import pytest
from factories import heal_result

from layerprobe.results import RunDir, TrackResult, write_json
from layerprobe.review import read_track, write_track


def test_track_follows_the_healed_kl_and_recovery(tmp_path):
    results = [heal_result(shift=0.0), heal_result(shift=0.1, method="linear+lora", seed=1)]
    directories = []
    for k, result in enumerate(results):
        directory = tmp_path / f"run{k}"
        directory.mkdir()
        write_json(RunDir(directory).heal_json, result.to_dict())
        directories.append(directory)
    _, track = read_track(directories, order="given")
    paths = write_track(track, tmp_path / "out", figures=False)
    data = json.loads(paths[0].read_text())
    again = TrackResult.from_dict(data)
    markdown = paths[1].read_text()
    for run, result in zip(again.runs, results, strict=True):
        assert run.heal is not None and run.heal.method == result.method and run.heal.removed == result.removed
        kl = result.metrics["kl"]
        assert run.heal.metrics["kl"]["healed"] == pytest.approx(kl["healed"]["value"])
        assert run.heal.metrics["kl"]["recovery"] == pytest.approx(kl["recovery"]["value"])
        low, high = kl["recovery"]["ci95"]
        assert f"{kl['recovery']['value']:.1%} [{low:.1%}, {high:.1%}]" in markdown
    assert "linear+lora, removed 2" in markdown
