"""The benchmark scripts still run end to end (tiny settings; they time nothing that is asserted)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run(script: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), *args],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
        # The script's own folder is sys.path[0]: point Python at this checkout, not whichever
        # layerprobe the environment has installed.
        env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.mark.slow
def test_bench_angular_runs(minilm):
    out = _run(
        "bench_angular.py", "--layers", "2", "--hidden", "64", "--tokens", "512", "--seq-len", "128", "--repeats", "1"
    )
    assert "ratio to floor" in out and "per-span / layerprobe" in out


@pytest.mark.slow
def test_bench_prune_drop_runs():
    out = _run(
        "bench_prune_drop.py",
        "--layers",
        "2",
        "--hidden",
        "32",
        "--limit",
        "3",
        "--num-fewshot",
        "0",
        "--tasks",
        "lp_arc_like",
        "--repeat",
        "1",
    )
    assert "shared/simple:  wall time ratio" in out and "block-token ratio" in out and "theory" in out


@pytest.mark.slow
def test_bench_memory_runs(tmp_path):
    out = _run(
        "bench_memory.py",
        "--shape",
        "tiny",
        "--layers",
        "2",
        "--tokens",
        "256",
        "--seq-len",
        "64",
        "--limit",
        "1",
        "--prune-layers",
        "0",
        "--engines",
        "shared",
        "--workdir",
        str(tmp_path / "model"),
    )
    assert "prune-drop:shared" in out and "angular / bare forward wall time" in out


@pytest.mark.slow
def test_bench_two_ranks_runs_clean():
    """Two CPU ranks under `accelerate launch`, twice (the benchmark's default is 30): every run exits clean."""
    out = _run("bench_two_ranks.py", "--runs", "2")
    assert "clean: 2/2" in out, out


@pytest.mark.slow
def test_bench_sequential_runs(tmp_path):
    out = _run(
        "bench_sequential.py",
        "--docs",
        "80",
        "--layers",
        "2",
        "--hidden",
        "32",
        "--round-size",
        "20",
        "--projection-runs",
        "1",
        "--device",
        "cpu",
        "--out",
        str(tmp_path),
    )
    assert "documents scored (baseline included)" in out and "full-run ΔP inside the interval" in out
    assert "Projection: MMLU 5-shot" in out and (tmp_path / "sequential.md").exists()


@pytest.mark.slow
def test_gpu_check_tiny_cpu_path(tmp_path):
    """The GPU check's every stage on a tiny LLaMA on the CPU: the JSON and the section it appends stay whole."""
    out = tmp_path / "out"
    _run(
        "gpu_check.py",
        "--shape",
        "tiny",
        "--device",
        "cpu",
        "--tokens",
        "1024",
        "--docs",
        "16",
        "--out",
        str(out),
        "--scratch",
        str(tmp_path / "scratch"),
    )
    record = json.loads((out / "gpu_check.json").read_text())
    stages = record["stages"]
    failed = {name: stage.get("error") for name, stage in stages.items() if not stage["ok"]}
    assert not failed, failed
    assert stages["angular"]["tokens"] == 1024 and stages["angular"]["tokens_per_second"] > 0
    assert stages["angular-device-map"]["device"] == "device_map=auto"
    full, seq = stages["prune-drop"], stages["prune-drop-seq"]
    # 4 blocks: the baseline and 4 variants of 16 questions; the block counter saw the engine's work.
    assert full["variants"] == 5 and full["documents_scored"] == full["documents_full_run"] == 5 * 16
    assert 0 < seq["documents_scored"] <= full["documents_scored"]
    assert full["block_work"]["block_tokens"] > 0 and seq["block_work"]["passes"] > 0
    assert not (tmp_path / "scratch").exists()  # the checkpoint is removed unless --keep
    target = tmp_path / "performance.md"
    target.write_text("# before\n")
    _run("gpu_check.py", "--render", str(out / "gpu_check.json"), "--append-to", str(target))
    text = target.read_text()
    assert text.startswith("# before\n") and "### gpu_check: tiny on CPU" in text
    assert "| prune-drop-seq |" in text and "`--precision 0.05` against the full run" in text


@pytest.mark.slow
def test_bench_callback_runs(minilm):
    out = _run(
        "bench_callback.py",
        *("--layers", "2", "--hidden", "64", "--steps", "4", "--every", "2", "--batch", "2", "--seq", "32"),
        *("--tokens", "256", "--scan-tokens", "256", "--scan-every", "10", "--api-tokens", "256"),
    )
    assert "overhead ratio" in out and "API vs CLI" in out and "max |Δd|" in out
    assert "losses unchanged: True" in out


@pytest.mark.slow
def test_bench_heal_runs():
    out = _run(
        "bench_heal.py", "--layers", "4", "--hidden", "64", "--vocab", "512", "--tokens", "512",
        "--held-out-tokens", "512", "--seq-len", "64", "--steps", "2", "--repeats", "1", "--task-docs", "40",
    )  # fmt: skip
    assert "KL gap closed, linear" in out and "gain: parameters / bytes" in out
    assert "bench_mmlu recovery, linear" in out and "bench_mmlu acc original" in out
