"""`layerprobe heal --method linear+lora` under a real two-rank `accelerate launch` (CPU, gloo) equals one process.

The launch splits every step's `--batch-size` windows between the two ranks and all-reduces the gradients
(accelerate's DDP); the same command in one process trains on the same windows per step. Checked: the launch
exits 0 and writes one heal.json and one checkpoint (loaded here with from_pretrained), quietly on rank 1;
heal.json records two processes; the per-step losses, the saved weights and the held-out numbers equal the
single process's up to float reduction order (tolerances in docs/methods.md); a launch killed after its first
checkpoint resumes under the launch to the same adapters, bit for bit; a state one process wrote resumes under
the launch; a --batch-size below the number of ranks leaves one idle per step and still equals one process.
`--device-map` and an FSDP launch are one line before any weight loads; their hints (drop
--device-map; launch with --multi_gpu) are what the launches here run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import transformers as tf
from command_line import invoke
from factories import build_checkpoint
from safetensors.torch import load_file

import layerprobe.heal.lora as lora
from layerprobe.core import BUILTIN_CORPUS, CorpusSpec, HealSpec, LayerprobeError, ModelSpec
from layerprobe.heal import run_heal
from layerprobe.model import World

ROOT = Path(__file__).resolve().parents[2]
STEPS = 6
KILLED = Path(__file__).with_name("killed_heal.py")


def _args(source: Path, out: Path, save: Path, *extra: object) -> list[str]:
    args = (
        "heal", source, "--remove", "2", "--dataset", BUILTIN_CORPUS, "--tokens", 512, "--held-out-tokens", 256,
        "--seq-len", 32, "--method", "linear+lora", "--steps", STEPS, "--rank", 2, "--batch-size", 4, "--lr", "3e-3",
        "--checkpoint-every", 3, "--save", save, "--out", out, *extra,
    )  # fmt: skip
    return [str(a) for a in args]


def _launch(args: list[str], script: Path | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    launcher = Path(sys.executable).parent / "accelerate"
    environment = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", **env}
    environment["PYTHONPATH"] = os.pathsep.join([str(ROOT), environment.get("PYTHONPATH", "")])
    command = [str(launcher), "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1"]
    command += ["--main_process_port", "0"]  # a free port: other launches may hold accelerate's default
    command += ["--mixed_precision", "no", "--dynamo_backend", "no"]
    command += [str(script), *args] if script is not None else ["-m", "layerprobe", *args]
    return subprocess.run(command, env=environment, capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("launch")
    source = build_checkpoint("llama", root / "src", num_layers=4)
    one = invoke(*_args(source, root / "one", root / "one-save"), "--quiet")
    assert one.exit_code == 0, one.output
    two = _launch(_args(source, root / "two", root / "two-save"))
    assert two.returncode == 0, (two.stdout + two.stderr)[-4000:]
    return source, root, two


@pytest.mark.slow
def test_two_ranks_write_once_and_equal_one_process(runs):
    source, root, launched = runs
    # written once: one heal.json, one checkpoint that loads; the summary printed by rank 0 alone
    assert launched.stdout.count("wrote ") == 1 and launched.stdout.count("kl: original") == 1
    assert sorted(p.name for p in (root / "two").iterdir() if p.suffix == ".json") == ["heal.json"]
    healed = tf.AutoModelForCausalLM.from_pretrained(root / "two-save")
    assert healed.config.num_hidden_layers == 3
    one = json.loads((root / "one" / "heal.json").read_text())
    two = json.loads((root / "two" / "heal.json").read_text())
    assert one["lora"]["processes"] == 1 and two["lora"]["processes"] == 2
    # the same windows per step: losses, kept step, weights and held-out numbers equal up to reduction order
    assert two["lora"]["losses"] == pytest.approx(one["lora"]["losses"], rel=1e-4)
    assert two["lora"]["losses"][0] == one["lora"]["losses"][0]  # step 1: the adapters still zero on both
    assert two["lora"]["check"]["kept_step"] == one["lora"]["check"]["kept_step"]
    a, b = load_file(root / "one-save" / "model.safetensors"), load_file(root / "two-save" / "model.safetensors")
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(b[name], a[name], rtol=0, atol=1e-6)
    for metric in ("nll", "kl", "top1_agreement"):
        x, y = one["held_out"]["metrics"][metric], two["held_out"]["metrics"][metric]
        assert x["original"]["value"] == y["original"]["value"] and x["pruned"]["value"] == y["pruned"]["value"]
        assert y["healed"]["value"] == pytest.approx(x["healed"]["value"], rel=1e-4, abs=1e-9)
    assert two["fits"][0]["relative_residual"] == one["fits"][0]["relative_residual"]
    assert not (root / "two" / "heal-state.rank1").exists()
    assert "Warning" not in launched.stderr, launched.stderr[-2000:]  # neither DDP's nor accelerate's


@pytest.mark.slow
def test_a_launch_killed_after_a_checkpoint_resumes_to_the_same_adapters(runs, tmp_path):
    """Both ranks die before step 5 (the state of step 3 on disk); `--resume` under the launch ends where the
    uninterrupted launch ended: every rank read the one state file that only rank 0 wrote."""
    source, root, _ = runs
    args = _args(source, tmp_path / "out", tmp_path / "save")
    killed = _launch(args, script=KILLED, KILL_AT_STEP="4")
    assert killed.returncode != 0 and not (tmp_path / "out" / "heal.json").exists()
    state = torch.load(tmp_path / "out" / "heal-state" / "lora_state.pt", weights_only=False)
    assert state["step"] == 3
    resumed = _launch([*args, "--resume"])
    assert resumed.returncode == 0, (resumed.stdout + resumed.stderr)[-4000:]
    again = json.loads((tmp_path / "out" / "heal.json").read_text())
    whole = json.loads((root / "two" / "heal.json").read_text())
    assert again["lora"]["losses"] == whole["lora"]["losses"]
    a, b = load_file(root / "two-save" / "model.safetensors"), load_file(tmp_path / "save" / "model.safetensors")
    for name in a:
        torch.testing.assert_close(b[name], a[name], rtol=0, atol=0)


@pytest.mark.slow
def test_a_state_one_process_wrote_resumes_under_a_launch(runs, tmp_path, monkeypatch):
    """A step does not depend on the number of ranks: one process killed after step 3, resumed on two ranks,
    keeps its three losses and ends where the two-rank run ended, up to float reduction order."""
    source, root, _ = runs
    args = _args(source, tmp_path / "out", tmp_path / "save")
    real = lora.learning_rate_factor

    def dying(step, steps):
        if step == 4:
            raise RuntimeError("killed after the checkpoint of step 3")
        return real(step, steps)

    monkeypatch.setattr(lora, "learning_rate_factor", dying)
    killed = invoke(*args, "--quiet")
    assert killed.exit_code != 0 and not (tmp_path / "out" / "heal.json").exists()
    monkeypatch.undo()
    one = json.loads((root / "one" / "heal.json").read_text())
    resumed = _launch([*args, "--resume"])
    assert resumed.returncode == 0, (resumed.stdout + resumed.stderr)[-4000:]
    again = json.loads((tmp_path / "out" / "heal.json").read_text())
    assert again["lora"]["processes"] == 2 and again["lora"]["losses"][:3] == one["lora"]["losses"][:3]
    two = json.loads((root / "two" / "heal.json").read_text())
    assert again["lora"]["losses"] == pytest.approx(two["lora"]["losses"], rel=1e-4)
    a, b = load_file(root / "two-save" / "model.safetensors"), load_file(tmp_path / "save" / "model.safetensors")
    for name in a:
        torch.testing.assert_close(b[name], a[name], rtol=0, atol=1e-6)


@pytest.mark.slow
def test_a_batch_smaller_than_the_launch_leaves_a_rank_idle_and_equals_one_process(runs, tmp_path):
    """--batch-size 1 on two ranks: rank 1 runs a stand-in window at weight 0 on every step; the step is rank 0's."""
    source, _, _ = runs
    args = _args(source, tmp_path / "one", tmp_path / "one-save", "--batch-size", 1, "--steps", 3)
    alone = invoke(*args, "--quiet")
    assert alone.exit_code == 0, alone.output
    launched = _launch(_args(source, tmp_path / "two", tmp_path / "two-save", "--batch-size", 1, "--steps", 3))
    assert launched.returncode == 0, (launched.stdout + launched.stderr)[-4000:]
    one, two = (json.loads((tmp_path / d / "heal.json").read_text())["lora"] for d in ("one", "two"))
    assert two["losses"] == pytest.approx(one["losses"], rel=1e-5) and len(two["losses"]) == 3
    a, b = (
        load_file(tmp_path / "one-save" / "model.safetensors"),
        load_file(tmp_path / "two-save" / "model.safetensors"),
    )
    for name in a:
        torch.testing.assert_close(b[name], a[name], rtol=0, atol=1e-6)


def test_device_map_under_a_launch_is_one_line_before_any_weight(tmp_path):
    spec = HealSpec(
        model=ModelSpec(str(tmp_path / "no-such-model"), device_map="auto"),
        corpus=CorpusSpec(dataset=BUILTIN_CORPUS, tokens=64, seq_len=32),
        remove="1",
        method="lora",
    )
    with pytest.raises(LayerprobeError) as caught:
        run_heal(spec, world=World(rank=0, size=2))  # refused before the (missing) model is even looked at
    assert "--device-map auto" in caught.value.message and "Drop --device-map" in (caught.value.hint or "")


def test_an_fsdp_launch_is_one_line_before_any_weight(tmp_path, monkeypatch):
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    spec = HealSpec(
        model=ModelSpec(str(tmp_path / "no-such-model")),
        corpus=CorpusSpec(dataset=BUILTIN_CORPUS, tokens=64, seq_len=32),
        remove="1",
        method="lora",
    )
    with pytest.raises(LayerprobeError) as caught:
        run_heal(spec, world=World(rank=1, size=2))
    assert "FSDP" in caught.value.message and "--multi_gpu" in (caught.value.hint or "")


@pytest.mark.slow
def test_torchrun_trains_as_accelerate_launch_does(runs, tmp_path):
    """The guide's other launcher: `torchrun --nproc_per_node 2 -m layerprobe heal …` equals the accelerate launch.

    accelerate reads torchrun's RANK / WORLD_SIZE / MASTER_ADDR like its own launcher's, so the same
    command gives the same adapters bit for bit (same split, same reductions) and writes once.
    """
    source, root, _ = runs
    environment = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    environment["PYTHONPATH"] = os.pathsep.join([str(ROOT), environment.get("PYTHONPATH", "")])
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    command += ["-m", "layerprobe", *_args(source, tmp_path / "out", tmp_path / "save")]
    done = subprocess.run(command, env=environment, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    assert done.stdout.count("wrote ") == 1
    launched = json.loads((root / "two" / "heal.json").read_text())
    torchrun = json.loads((tmp_path / "out" / "heal.json").read_text())
    assert torchrun["lora"]["processes"] == 2 and torchrun["lora"]["losses"] == launched["lora"]["losses"]
    a, b = load_file(root / "two-save" / "model.safetensors"), load_file(tmp_path / "save" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[name], b[name]) for name in a)
