"""Two real ranks (torch.distributed on CPU) equal one process: each rank does its share of the variants
and of angular's batches, and the results written are bit-identical to one process's."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from factories import SHARD_SETTINGS, loaded_head, prune_spec
from watching import angular_json

from layerprobe.core import BUILTIN_CORPUS, AngularSpec, CorpusSpec, LayerprobeError, ModelSpec
from layerprobe.measure.angular import run_angular
from layerprobe.model import World, world
from layerprobe.model.ranks import RENDEZVOUS_ENV, launch_environment
from layerprobe.prune.drop import run_prune_drop

ROOT = Path(__file__).resolve().parents[2]


RANK_SCRIPT = """
import json, os, sys
from pathlib import Path
sys.path.insert(0, {tests!r})
from factories import SHARD_SETTINGS, prune_spec
from watching import angular_json
from layerprobe.measure.angular import run_angular
from layerprobe.model.progress import Progress
from layerprobe.prune.drop import run_prune_drop
from layerprobe.core import BUILTIN_CORPUS, AngularSpec, CorpusSpec, ModelSpec
rank = int(os.environ["RANK"])
variants, tokens, stage = [], [], [None]
spec = prune_spec({model!r}, **SHARD_SETTINGS, engine={engine!r})
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


def _env() -> dict[str, str]:
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    return env


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["shared", "simple"])
def test_two_cpu_ranks_equal_one_process_each_doing_a_share(tiny_checkpoints, tmp_path, engine):
    path = str(tiny_checkpoints["llama"])
    out = tmp_path / "ranks"
    script = tmp_path / "ranks.py"
    script.write_text(RANK_SCRIPT.format(tests=str(ROOT / "tests"), model=path, engine=engine, out=str(out)))
    launched = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", str(script)],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert launched.returncode == 0, launched.stderr[-3000:]
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]

    one = run_prune_drop(prune_spec(path, **SHARD_SETTINGS, engine=engine), tmp_path / "one", loaded=loaded_head(path))
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


LAUNCH_VARIABLES = ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", RENDEZVOUS_ENV)


@pytest.mark.parametrize(
    ("variables", "message"),
    [
        ({"WORLD_SIZE": "2"}, "WORLD_SIZE=2 is set, but RANK, MASTER_ADDR, MASTER_PORT are not"),
        ({"WORLD_SIZE": "2", "RANK": "0", "MASTER_PORT": "29500"}, "but MASTER_ADDR is not"),
        ({"WORLD_SIZE": "two"}, "WORLD_SIZE='two' is not a number"),
        ({"WORLD_SIZE": "2", "RANK": "2", "MASTER_ADDR": "h", "MASTER_PORT": "1"}, "RANK=2 is outside WORLD_SIZE=2"),
        ({"WORLD_SIZE": "2", "RANK": "x", "MASTER_ADDR": "h", "MASTER_PORT": "1"}, "RANK='x' is not a whole number"),
        ({"WORLD_SIZE": "2", "RANK": "1", "MASTER_ADDR": "h", "MASTER_PORT": "0"}, "MASTER_PORT=0 are not valid"),
    ],
)
def test_an_inconsistent_launch_environment_is_one_line(monkeypatch, variables, message):
    for name in LAUNCH_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(LayerprobeError, match=re.escape(message)) as caught:
        world()
    assert "accelerate launch" in (caught.value.hint or "")


def test_a_launch_environment_is_read_and_no_launch_is_one_process(monkeypatch):
    for name in LAUNCH_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    assert launch_environment() is None and world() == World()
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert launch_environment() is None
    variables = {"WORLD_SIZE": "4", "RANK": "3", "LOCAL_RANK": "1", "MASTER_ADDR": "node0", "MASTER_PORT": "29501"}
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    assert launch_environment() == (3, 4, "node0", 29501)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.slow
@pytest.mark.parametrize("stale", ["WORLD_SIZE alone", "no peer at MASTER_ADDR", "no rank 0"])
def test_a_stale_world_size_is_one_line_and_exit_2_within_seconds(tiny_checkpoints, tmp_path, stale):
    """A WORLD_SIZE left in the shell: refused before anything loads, or after a short rendezvous, never a hang."""
    env = {k: v for k, v in _env().items() if k not in LAUNCH_VARIABLES}
    env["WORLD_SIZE"] = "2"
    if stale != "WORLD_SIZE alone":
        env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()), RANK="0" if "peer" in stale else "1")
        env[RENDEZVOUS_ENV] = "3"
    command = [sys.executable, "-m", "layerprobe", "angular", str(tiny_checkpoints["llama"]), "--dataset"]
    command += [BUILTIN_CORPUS, "--tokens", "256", "--quiet", "--out", str(tmp_path / "a")]
    start = time.monotonic()
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=240, cwd=tmp_path)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr[-3000:]
    assert (
        len(lines) == 2 and lines[0].startswith("error: WORLD_SIZE=2") and lines[1].startswith("hint: Unset WORLD_SIZE")
    )
    assert {"WORLD_SIZE alone": "not started by a launcher", "no peer at MASTER_ADDR": "did not join"}.get(
        stale, "rank 0 could not be reached"
    ) in lines[0]
    assert "within 3 s" in lines[0] or stale == "WORLD_SIZE alone"
    assert not (tmp_path / "a").exists()
    # Seconds, not the 30-minute (or 7-day) wait of a process group: the interpreter's start dominates here.
    assert time.monotonic() - start < 200
