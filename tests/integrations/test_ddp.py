"""`LayerprobeCallback` and `Monitor` under a real two-rank `accelerate launch` (CPU, gloo).

ddp_training.py trains a tiny LLaMA on two CPU ranks twice in one launch, without and with the callback.
Checked: the ranks share each angular measurement (rank 1 runs its own batches of it) and the result equals one
process's; only rank 0 logs and writes `step-N/`, each once; training losses are those of the run without the
callback; the model is given back in training mode. Also with gradient accumulation and gradient
checkpointing, where the Trainer's step and the model's forward differ from the plain run's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from factories import build_checkpoint

SCRIPT = Path(__file__).with_name("ddp_training.py")
ROOT = Path(__file__).resolve().parents[2]
MEASURED = [3, 6]  # ddp_training.STEPS, EVERY


def launch(checkpoint: Path, out: Path, *options: str) -> list[dict]:
    launcher = Path(sys.executable).parent / "accelerate"
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    command = [str(launcher), "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1"]
    command += ["--mixed_precision", "no", "--dynamo_backend", "no", str(SCRIPT), str(checkpoint), str(out)]
    done = subprocess.run([*command, *options], env=env, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    return [json.loads((out / f"rank{rank}.json").read_text()) for rank in (0, 1)]


def losses(log: list[dict]) -> list[tuple[int, float]]:
    return [(entry["step"], entry["loss"]) for entry in log if "loss" in entry]


@pytest.mark.slow
@pytest.mark.parametrize("options", [(), ("--accumulate", "2", "--checkpointing")], ids=["plain", "accumulate+ckpt"])
def test_two_ranks_share_the_measurement_and_log_it_once(tmp_path, options):
    checkpoint = build_checkpoint("llama", tmp_path / "llama")
    first, second = launch(checkpoint, tmp_path / "out", *options)
    assert first["world_size"] == second["world_size"] == 2
    assert first["monitor_world"] == second["monitor_world"] == 2
    # rank 1 ran one of the three calibration batches of each measurement; rank 0 its two, and depth alone
    assert second["eval_batches"] == len(MEASURED)
    assert first["eval_batches"] > 2 * len(MEASURED)
    # logged once: the scalars reach rank 0's log at the measured steps only; rank 1 logs none
    assert [step for step, _ in first["history"]] == MEASURED and second["history"] == []
    for where in ("log", "reported"):  # the Trainer's log history, and what the dashboards' callbacks receive
        assert [e["step"] for e in first[where] if "layerprobe/lazy_blocks" in e] == MEASURED
        assert not any(key.startswith("layerprobe/") for entry in second[where] for key in entry)
    assert all(f"layerprobe/grad_norm/block_{b}" in first["history"][0][1] for b in range(4))
    # written once, by rank 0: one directory per measured step, each with exactly its two results
    runs = tmp_path / "out" / "runs"
    assert sorted(p.name for p in runs.iterdir()) == [f"step-{s}" for s in MEASURED]
    for step in MEASURED:
        assert sorted(p.name for p in (runs / f"step-{step}").iterdir()) == ["angular.json", "depth.json"]
    # shared across ranks, the measurement equals one process's on the same model
    shared = json.loads((runs / "step-6" / "angular.json").read_text())["distance"]
    np.testing.assert_allclose(shared, first["alone"], rtol=0, atol=1e-7)
    # training is untouched: the same losses as the run without the callback, on both ranks
    for rank in (first, second):
        assert losses(rank["log"]) == losses(rank["plain_log"]) and losses(rank["log"])
        assert rank["training"]
