"""Do two CPU ranks under `accelerate launch` start, finish and exit cleanly, run after run?

Runs `CUDA_VISIBLE_DEVICES= accelerate launch --multi_gpu --num_processes 2 -m layerprobe angular …` (the
README's two-rank example, with a budget the built-in corpus holds) N times on a tiny random LLaMA built
here (or --model PATH), each into a fresh --out, and counts a run clean when the launcher exits 0, every
rank's output is free of "terminate called", "Aborted", "SIGABRT", "Traceback" and "ChildFailedError",
and angular.json was written. Prints one line per run and `clean: K/N`; exits 1 unless every run is clean.

    python benchmarks/bench_two_ranks.py --runs 30
    python benchmarks/bench_two_ranks.py --runs 5 --command prune-drop --model /path/to/ckpt
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FAILURE_SIGNS = ("terminate called", "Aborted", "SIGABRT", "Traceback", "ChildFailedError")


def build_model(directory: Path) -> Path:
    """A 4-block LLaMA with hidden size 64 and the demo model's tokenizer (no network)."""
    import torch
    import transformers as tf

    from layerprobe.model import demo_model_dir

    tokenizer = tf.AutoTokenizer.from_pretrained(demo_model_dir())
    config = tf.LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=4,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=512,
    )
    torch.manual_seed(0)
    tf.LlamaForCausalLM(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def command_args(command: str, model: Path, out: Path, tokens: int) -> list[str]:
    if command == "angular":
        return ["angular", str(model), "--dataset", "builtin:pydoc", "--split", "train", "--tokens", str(tokens)]
    tasks = Path(__file__).resolve().parents[1] / "tests" / "data" / "tasks"
    return ["prune-drop", str(model), "--task", "lp_arc_like", "--include-path", str(tasks), "--limit", "4"]


def one_run(command: str, model: Path, out: Path, tokens: int, timeout: float) -> tuple[bool, str, float]:
    """(clean, why not, seconds) of one two-rank launch."""
    args = [
        "accelerate", "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
        "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", str(free_port()),
        "-m", "layerprobe", *command_args(command, model, out, tokens), "--out", str(out), "--quiet",
    ]  # fmt: skip
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    start = time.perf_counter()
    try:
        done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return False, f"timed out after {timeout:g} s", time.perf_counter() - start
    seconds = time.perf_counter() - start
    text = done.stdout + done.stderr
    signs = [sign for sign in FAILURE_SIGNS if sign in text]
    written = (out / ("angular.json" if command == "angular" else "prune_drop.json")).is_file()
    if done.returncode != 0 or signs or not written:
        tail = " | ".join(text.strip().splitlines()[-3:])
        return False, f"exit {done.returncode}, {signs or 'no sign'}, result written: {written}: {tail}", seconds
    return True, "", seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--model", type=Path, default=None, help="a checkpoint (default: a tiny LLaMA built here)")
    parser.add_argument("--command", choices=("angular", "prune-drop"), default="angular")
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds one launch may take")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-two-ranks-") as scratch:
        model = args.model or build_model(Path(scratch) / "model")
        clean = 0
        for run in range(1, args.runs + 1):
            ok, why, seconds = one_run(args.command, model, Path(scratch) / f"run{run}", args.tokens, args.timeout)
            clean += ok
            print(
                f"run {run:2d}: {'clean' if ok else 'FAILED'} ({seconds:.0f} s){'' if ok else ': ' + why}", flush=True
            )
    print(f"clean: {clean}/{args.runs}")
    return 0 if clean == args.runs else 1


if __name__ == "__main__":
    sys.exit(main())
