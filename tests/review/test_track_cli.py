"""`layerprobe track` end to end on real run directories: every number of track.json recomputed from the inputs."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from reference import direct_ratio_stderr
from typer.testing import CliRunner

from layerprobe.cli.app import app
from layerprobe.results import TrackResult

runner = CliRunner()
Z = 1.96


def track(args, **kwargs):
    return runner.invoke(app, ["track", *map(str, args)], **kwargs)


@pytest.fixture(scope="module")
def tracked(review_runs, tmp_path_factory):
    out = tmp_path_factory.mktemp("track")
    result = track([*review_runs.scrambled, "--out", out, "--format", "markdown"])
    assert result.exit_code == 0, result.output
    return out, result.stdout, json.loads((out / "track.json").read_text())


def test_runs_are_ordered_by_the_step_in_their_checkpoint_directory(tracked, review_runs):
    _, _, data = tracked
    assert data["schema"] == "layerprobe/track@1" and data["order"] == "step" and data["align"] == "block"
    assert [run["step"] for run in data["runs"]] == [1000, 2000, 3000]
    assert [run["label"] for run in data["runs"]] == ["step 1000", "step 2000", "step 3000"]
    for run in data["runs"]:
        step = run["step"]
        assert run["directory"] == str(review_runs.by_step[step]) and run["step_from"] == "directory"
        angular = review_runs.raw(step, "angular")
        assert run["model"] == angular["model"]["id"] and run["model"].endswith(f"checkpoint-{step}")
        assert run["revision"] is None and run["commit"] == angular["model"]["commit"] and run["num_layers"] == 4
        assert run["files"] == {
            kind: str(review_runs.by_step[step] / name)
            for kind, name in (
                ("angular", "angular.json"),
                ("prune_drop", "prune_drop.json"),
                ("depth", "depth.json"),
                ("prune_curve", "prune_curve.json"),
            )
        }
        assert run["positions"] == [0.0, 1.0, 2.0, 3.0]


def test_angular_numbers_match_a_direct_computation(tracked, review_runs):
    _, _, data = tracked
    for run in data["runs"]:
        raw = review_runs.raw(run["step"], "angular")
        d, se = raw["distance"], raw["distance_stderr"]
        adjacent = [d[l][l + 1] for l in range(4)]
        adjacent_se = [se[l][l + 1] for l in range(4)]
        got = run["angular"]
        assert got["adjacent"] == adjacent and got["adjacent_stderr"] == adjacent_se
        assert got["lazy_threshold"] == 0.2
        assert got["lazy_count"] == sum(x < 0.2 for x in adjacent)
        assert got["surely_below"] == sum(x + Z * s < 0.2 for x, s in zip(adjacent, adjacent_se, strict=True))
        assert got["possibly_below"] == sum(x - Z * s < 0.2 for x, s in zip(adjacent, adjacent_se, strict=True))
        mean = sum(adjacent) / 4
        _, windowed = direct_ratio_stderr(np.array(raw["adjacent_windows"]), np.array(raw["window_positions"]))
        assert got["mean_adjacent"] == pytest.approx(mean, rel=1e-12)
        assert got["mean_adjacent_stderr"] == pytest.approx(windowed, rel=1e-12)
        assert got["stderr_method"] == "windows"  # these files carry per-window values
        assert got["mean_adjacent_ci95"] == pytest.approx([mean - Z * windowed, mean + Z * windowed], rel=1e-12)


def test_scores_and_watched_deltas_are_the_prune_drop_values(tracked, review_runs):
    _, _, data = tracked
    first = review_runs.raw(1000, "prune_drop")["tasks"]["lp_arc_like"]["metrics"]["acc"]
    sign = 1 if first["higher_is_better"] else -1
    worst = min(range(len(first["layers"])), key=lambda i: sign * first["delta"][i])
    watched = first["layers"][worst]
    assert data["watch"] == {
        "source": "most harmful block of each task in the first run",
        "blocks": {"lp_arc_like": [watched]},
    }
    for run in data["runs"]:
        metric = review_runs.raw(run["step"], "prune_drop")["tasks"]["lp_arc_like"]["metrics"]["acc"]
        task = run["prune_drop"]["lp_arc_like"]
        assert task["metric"] == "acc" and task["baseline"] == metric["baseline"]
        # acc is k right of n: Wilson's interval, as the report's figures give it (one quantity, one interval)
        n = review_runs.raw(run["step"], "prune_drop")["tasks"]["lp_arc_like"]["samples"]
        k, z = round(metric["baseline"] * n), 1.959963984540054
        centre, half = (k + z * z / 2) / (n + z * z), z / (n + z * z) * math.sqrt(k * (n - k) / n + z * z / 4)
        assert task["baseline_ci95"] == pytest.approx([centre - half, centre + half], rel=1e-9)
        i = metric["layers"].index(watched)
        assert task["watched"] == [
            {
                "watched": watched,
                "block": watched,
                "delta": metric["delta"][i],
                "delta_ci95": metric["delta_ci95"][i],
                "significant": metric["significant"][i],
            }
        ]


def test_depth_and_curve_numbers_match_the_inputs(tracked, review_runs):
    _, _, data = tracked
    for run in data["runs"]:
        depth = review_runs.raw(run["step"], "depth")
        rms = depth["residual"]["rms"]["mean"]
        grad = depth["grad"]["block"]
        assert run["depth"]["rms_growth"] == pytest.approx(rms[-1] / rms[0], rel=1e-12)
        assert run["depth"]["grad"] == grad and run["depth"]["grad_loss"] == "next-token"
        assert run["depth"]["grad_ratio_last_first"] == pytest.approx(grad[-1] / grad[0], rel=1e-12)
        assert run["depth"]["placement"] == depth["placement"]["summary"]
        curve = review_runs.raw(run["step"], "prune_curve.json")
        metric_name, baseline = next(iter(curve["baseline"]["corpus"].items()))
        got = run["prune_curve"]["corpus"]
        assert got["metric"] == metric_name and got["baseline"] == baseline["value"]
        for method, entry in curve["methods"].items():
            mine = got["methods"][method]
            sets = sorted(entry["sets"].items(), key=lambda item: int(item[0]))
            scores = [chosen["scores"]["corpus"][metric_name] for _, chosen in sets]
            assert mine["fraction"] == [int(n) / 4 for n, _ in sets]
            assert mine["delta"] == [score["delta"] for score in scores]
            for have, score in zip(mine["delta_ci95"], scores, strict=True):  # the paired interval the file records
                want, d, e = score["delta_ci95"], score["delta"], score["delta_stderr"]
                assert have == want and (want is None or want == pytest.approx([d - Z * e, d + Z * e], rel=1e-3))


def test_markdown_on_stdout_is_track_md_and_the_json_reads_back(tracked):
    out, stdout, data = tracked
    assert stdout == (out / "track.md").read_text()
    lines = stdout.splitlines()
    assert lines[0].startswith("### layerprobe track: ") and "(3 checkpoints) · 3 runs, by training step" in lines[0]
    rows = [line for line in lines if line.startswith("| step ")]
    assert [row.split(" | ")[0] for row in rows] == ["| step 1000", "| step 2000", "| step 3000"]
    first = data["runs"][0]["angular"]
    lo, hi = first["mean_adjacent_ci95"]
    assert f"{first['mean_adjacent']:.4f} [{lo:.4f}, {hi:.4f}] |" in rows[0] and "†" not in rows[0]
    assert f"{first['lazy_count']} ({first['surely_below']}–{first['possibly_below']})" in rows[0]
    assert "Every interval is a 95 % interval" in stdout
    parsed = TrackResult.from_dict(data, "track.json")
    assert parsed.to_dict() == data


def test_figures_are_written_with_both_formats(tracked):
    out, _, _ = tracked
    for what in ("lazy", "adjacent", "heat", "scores", "delta", "residual", "grad", "curve"):
        assert (out / f"track_{what}.png").stat().st_size > 5_000, what
        assert (out / f"track_{what}.pdf").stat().st_size > 1_000, what


def test_json_format_on_stdout_and_given_order(review_runs, tmp_path):
    args = [*review_runs.scrambled, "--out", tmp_path, "--format", "json", "--order", "given", "-q", "--no-plot"]
    result = track(args)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data == json.loads((tmp_path / "track.json").read_text())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["track.json", "track.md"]  # --no-plot
    assert data["order"] == "given" and [run["step"] for run in data["runs"]] == [3000, 1000, 2000]


def test_watch_follows_the_blocks_asked_for(review_runs, tmp_path):
    result = track([*review_runs.scrambled, "--out", tmp_path, "--watch", "1,3", "--format", "json", "-q", "--no-plot"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["watch"] == {"source": "--watch", "blocks": {"lp_arc_like": [1, 3]}}
    for run in data["runs"]:
        metric = review_runs.raw(run["step"], "prune_drop")["tasks"]["lp_arc_like"]["metrics"]["acc"]
        got = run["prune_drop"]["lp_arc_like"]["watched"]
        assert [w["block"] for w in got] == [1, 3]
        assert [w["delta"] for w in got] == [metric["delta"][metric["layers"].index(b)] for b in (1, 3)]
        assert [w["delta_ci95"] for w in got] == [metric["delta_ci95"][metric["layers"].index(b)] for b in (1, 3)]


@pytest.mark.slow  # over 3 s on 2 cores: the default tier stays under 3 minutes
def test_relative_alignment_places_blocks_at_relative_depth(review_runs, tmp_path):
    args = [review_runs.by_step[1000], review_runs.deep, "--out", tmp_path, "--format", "json", "-q"]
    refused = track(args)
    assert refused.exit_code == 2
    assert "different numbers of blocks (L = 4 in y, L = 6 in deep)" in refused.output
    assert "--align relative" in refused.output and "Traceback" not in refused.output
    result = track([*args, "--align", "relative"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["align"] == "relative" and [run["step"] for run in data["runs"]] == [1000, 4000]
    assert data["runs"][1]["positions"] == pytest.approx([(l + 0.5) / 6 for l in range(6)])
    assert data["runs"][0]["positions"] == pytest.approx([(l + 0.5) / 4 for l in range(4)])
    assert (tmp_path / "track_heat.png").is_file()


def test_runs_of_another_model_are_refused_unless_allowed(review_runs, tmp_path):
    refused = track([review_runs.by_step[1000], review_runs.other, "--out", tmp_path])
    assert refused.exit_code == 2
    assert "The runs measured different models" in refused.output and "--allow-mixed" in refused.output
    allowed = track(
        [
            review_runs.by_step[1000],
            review_runs.other,
            "--out",
            tmp_path,
            "--allow-mixed",
            "--format",
            "json",
            "-q",
            "--no-plot",
        ]
    )
    assert allowed.exit_code == 0, allowed.output
    data = json.loads(allowed.stdout)
    assert data["mixed"] is True and data["order"] == "given"  # model-b carries no step
    assert any("runs of different models" in note for note in data["notes"])


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--watch", "7"], "--watch '7' is out of range: the model has 4 blocks"),
        (["--watch", "one"], "Cannot read layer range 'one' in --watch 'one'"),
        (["--align", "sideways"], "Invalid value for '--align'"),
        (["--format", "html"], "Invalid value for '--format'"),
    ],
)
def test_bad_options_are_one_line_and_status_2(review_runs, tmp_path, extra, message):
    result = track([review_runs.by_step[1000], "--out", tmp_path, *extra])
    assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output


@pytest.mark.slow  # over 2.5 s on 2 cores: the default tier stays under 3 minutes
def test_bad_run_directories_are_one_line_and_status_2(review_runs, tmp_path):
    missing = track([tmp_path / "nope", "--out", tmp_path / "o"])
    assert missing.exit_code == 2 and f"Run directory {tmp_path / 'nope'} does not exist." in missing.output
    (tmp_path / "empty").mkdir()
    empty = track([tmp_path / "empty", "--out", tmp_path / "o"])
    assert empty.exit_code == 2 and "holds no layerprobe result" in empty.output
    a_file = review_runs.by_step[1000] / "angular.json"
    as_file = track([a_file, "--out", tmp_path / "o"])
    assert as_file.exit_code == 2 and "is a file, not a run directory" in as_file.output
    only_angular = track([review_runs.deep, "--out", tmp_path / "o", "--watch", "1"])
    assert only_angular.exit_code == 2 and "no run has a prune_drop.json" in only_angular.output
    for result in (missing, empty, as_file, only_angular):
        assert "Traceback" not in result.output and result.output.count("error:") == 1
    assert not (tmp_path / "o").exists()


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc, where no folder can be made")
@pytest.mark.parametrize("command, out", [("track", "/proc/layerprobe-out"), ("report", "/proc/layerprobe.html")])
def test_an_out_that_cannot_be_written_is_one_line_and_exit_2(review_runs, command, out):
    """/proc refuses every new file, also to root (whom access() says yes to everywhere)."""
    result = runner.invoke(app, [command, *map(str, review_runs.scrambled), "--out", out])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "error:" in result.output and out in "".join(result.output.split())
