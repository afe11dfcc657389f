"""`track` follows heal.json across runs: the held-out KL and the recovery, per run, read back and drawn."""

from __future__ import annotations

import json

import pytest
from factories import heal_result

from layerprobe.plots import pyplot, track_figures
from layerprobe.results import RunDir, TrackResult, write_json
from layerprobe.review import read_track, write_track


def test_track_follows_the_healed_kl_and_recovery(tmp_path):
    results = [heal_result(shift=0.0), heal_result(shift=0.1, method="linear+lora", seed=1)]
    track = _track(tmp_path, results)
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


def _track(tmp_path, results):
    directories = []
    for k, result in enumerate(results):
        directory = tmp_path / f"run{k}"
        directory.mkdir()
        write_json(RunDir(directory).heal_json, result.to_dict())
        directories.append(directory)
    return read_track(directories, order="given")[1]


def test_track_draws_the_pruned_and_healed_kl_and_each_recovery(tmp_path):
    results = [heal_result(shift=0.0), heal_result(shift=0.2, method="linear+lora", seed=1)]
    figures = track_figures(_track(tmp_path, results))
    figure = figures["heal"]
    lines = {line.get_label(): line for ax in figure.axes for line in ax.get_lines()}
    pruned, healed = lines["pruned model"], lines["healed model"]
    assert list(pruned.get_ydata()) == pytest.approx([r.metrics["kl"]["pruned"]["value"] for r in results])
    assert list(healed.get_ydata()) == pytest.approx([r.metrics["kl"]["healed"]["value"] for r in results])
    recovered = [lines["KL(original ‖ model)"], lines["NLL"], lines["top-1 agreement"]]
    for line, metric in zip(recovered, ("kl", "nll", "top1_agreement"), strict=True):
        expected = [100 * r.metrics[metric]["recovery"]["value"] for r in results]
        assert list(line.get_ydata()) == pytest.approx(expected), metric
    legends = " | ".join(t.get_text() for ax in figure.axes for t in ax.get_legend().get_texts())
    assert "95 % CI" in legends and "bootstrap 95 % CI" in legends and "original (0)" in legends
    for fig in figures.values():
        pyplot().close(fig)


def test_a_track_json_written_before_the_pruned_values_reads_them_as_none(tmp_path):
    track = _track(tmp_path, [heal_result()])
    data = json.loads(json.dumps(track.to_dict()))
    for entry in data["runs"][0]["heal"]["metrics"].values():
        for key in ("original", "pruned", "pruned_ci95"):
            del entry[key]
    again = TrackResult.from_dict(data)
    assert again.runs[0].heal.metrics["kl"]["pruned"] is None
    assert track_figures(again)["heal"] is not None
