"""The first measurement on a GPU, in under 8 minutes and without the Hub: what users run, timed.

Builds a LLaMA-2-7B-shaped checkpoint (hidden 4096, 32 blocks, 32 heads, intermediate 11008, vocab
32000) with random bf16 weights ON the device (initialised there, never on the CPU), saves it with
`save_pretrained` next to a 4096-token byte-level BPE trained on the stdlib's pydoc text (ids < 32000),
and runs the real command line (`python -m layerprobe …` in a subprocess) on it:

  angular            262,144 tokens of the pydoc text (repeated as often as needed): seconds with loading
                     (the subprocess, and the result's `run.seconds`), without (`tokens / tokens_per_second`),
                     tokens/s;
  angular-device-map the same with `--device-map auto` across whatever devices are there;
  prune-drop-seq     an MMLU-shaped 5-shot local group (4 subjects, --docs questions, 4 choices, random gold)
                     with `--precision 0.05`: seconds, documents scored (baseline included), block work;
  prune-drop         the same in full.

Block work is counted by a global forward hook on the model's decoder layers, installed in the CLI's own
process (`python -c …` that runs `layerprobe`'s `__main__`): block passes, rows and rows × positions.

Every stage runs in try/except (its error text goes to the JSON, the next stage still runs); after each one
`gpu_check.json` and `gpu_check.md` are rewritten in --out, so a run killed by a time limit leaves what it
measured. `--budget-s` skips stages once the time is spent and caps each subprocess at what is left.
`--append-to docs/performance.md` appends the markdown section (also later: `--render JSON --append-to …`).

    python benchmarks/gpu_check.py --out $OUT                          # H200: the 7B shape, bf16
    python benchmarks/gpu_check.py --shape tiny --device cpu --out /tmp/gc   # the CPU path the slow tests run
    python benchmarks/gpu_check.py --render $OUT/gpu_check.json --append-to docs/performance.md
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import time
import traceback
from datetime import datetime, timezone
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parent.parent
START = time.perf_counter()

# (hidden, intermediate, blocks, heads, tokens, seq-len, batch, questions) per shape.
SHAPES = {
    "llama2-7b": dict(hidden=4096, intermediate=11008, layers=32, heads=32, tokens=262144, seq_len=1024, docs=400),
    "tiny": dict(hidden=64, intermediate=192, layers=4, heads=2, tokens=2048, seq_len=256, docs=24),
}
TASK = "bench_mmlu"

# Runs layerprobe's command line in this process with a forward hook counting decoder-layer work; the
# counts go to the file named by LP_GPU_CHECK_BLOCKS when the process exits (also on SystemExit).
COUNTING_LAUNCHER = """
import atexit, json, os, runpy, sys
import torch
counts = {"passes": 0, "rows": 0, "block_tokens": 0}
def hook(module, args, kwargs, output):
    if type(module).__name__.endswith("DecoderLayer"):
        x = args[0] if args else kwargs.get("hidden_states")
        if isinstance(x, torch.Tensor) and x.dim() >= 2:
            counts["passes"] += 1
            counts["rows"] += int(x.shape[0])
            counts["block_tokens"] += int(x.shape[0]) * (int(x.shape[1]) if x.dim() > 2 else 1)
torch.nn.modules.module.register_module_forward_hook(hook, with_kwargs=True)
atexit.register(lambda: open(os.environ["LP_GPU_CHECK_BLOCKS"], "w").write(json.dumps(counts)))
sys.argv = ["layerprobe", *sys.argv[1:]]
runpy.run_module("layerprobe", run_name="__main__", alter_sys=True)
"""


def log(message: str) -> None:
    """A progress line with the UTC time and the seconds since start, flushed (a log read while it runs)."""
    now = datetime.now(timezone.utc).strftime("%H:%M:%S")
    print(f"[{now} +{time.perf_counter() - START:6.1f}s] {message}", flush=True)


# --------------------------------------------------------------------------------------------- stages
def environment(device: str) -> dict:
    """The machine: device name, driver, CUDA, library versions."""
    import importlib.metadata as md

    import torch

    info: dict = {"python": platform.python_version(), "platform": platform.platform(), "device": device}
    for name in ("torch", "transformers", "accelerate", "datasets", "lm_eval", "peft"):
        try:
            info[name] = md.version(name.replace("_", "-"))
        except md.PackageNotFoundError:
            info[name] = None
    info["cuda"] = torch.version.cuda
    info["cpu_threads"] = torch.get_num_threads()
    if torch.cuda.is_available():
        info["gpu_count"] = torch.cuda.device_count()
        info["gpu"] = torch.cuda.get_device_name(0)
        info["gpu_memory_gib"] = round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1)
        try:
            smi = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=30,
            )
            info["driver"] = smi.stdout.strip().splitlines()[0] if smi.returncode == 0 else None
        except (OSError, subprocess.SubprocessError, IndexError):
            info["driver"] = None
    return info


def build_tokenizer():
    """A 4096-token byte-level BPE trained on the stdlib's pydoc topics (ids stay below the 32,000 vocab)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench_memory import build_tokenizer as pydoc_bpe

    return pydoc_bpe()


def build_checkpoint(directory: Path, shape: dict, device: str, dtype: str) -> dict:
    """Random weights initialised on `device` (normal(0, 0.02), norms 1), saved with a tokenizer."""
    import torch
    import transformers as tf

    config = tf.LlamaConfig(
        vocab_size=32000,
        hidden_size=shape["hidden"],
        intermediate_size=shape["intermediate"],
        num_hidden_layers=shape["layers"],
        num_attention_heads=shape["heads"],
        num_key_value_heads=shape["heads"],
        max_position_embeddings=4096,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
        architectures=["LlamaForCausalLM"],
        dtype=dtype,
    )
    torch.manual_seed(0)
    started = time.perf_counter()
    default = torch.get_default_dtype()
    torch.set_default_dtype(getattr(torch, dtype))  # built in its dtype: no float32 copy of 7B first
    try:
        with torch.device(device):
            model = tf.LlamaForCausalLM(config)
    finally:
        torch.set_default_dtype(default)
    with torch.no_grad():  # small weights keep the states finite at depth
        for name, param in model.named_parameters():
            if "norm" in name:
                param.fill_(1.0)
            else:
                param.normal_(0.0, 0.02)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    init_seconds = time.perf_counter() - started
    log(f"initialised {sum(p.numel() for p in model.parameters()):,} parameters on {device} in {init_seconds:.1f}s")
    started = time.perf_counter()
    model.save_pretrained(directory, max_shard_size="5GB")
    tokenizer = build_tokenizer()
    tokenizer.save_pretrained(directory)
    save_seconds = time.perf_counter() - started
    parameters = sum(p.numel() for p in model.parameters())
    del model
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    size = sum(f.stat().st_size for f in directory.iterdir() if f.is_file())
    return {
        "parameters": parameters,
        "init_seconds": init_seconds,
        "save_seconds": save_seconds,
        "bytes_on_disk": size,
        "tokenizer_size": len(tokenizer),
    }


def write_corpus(path: Path, tokenizer_dir: Path, tokens: int) -> dict:
    """The pydoc topics as a .jsonl corpus, repeated until it holds 10 % more tokens than asked for."""
    from pydoc_data.topics import topics

    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    texts = [topics[key] for key in sorted(topics)]
    per_copy = sum(len(ids) for ids in tokenizer(texts)["input_ids"])
    copies = max(1, -(-int(tokens * 1.1) // per_copy))
    with path.open("w") as handle:
        for _ in range(copies):
            for text in texts:
                handle.write(json.dumps({"text": text}) + "\n")
    return {"tokens_per_copy": per_copy, "copies": copies}


def write_task(folder: Path, docs: int, seed: int) -> dict:
    """An MMLU-shaped group (4 subjects, 5 dev questions each for 5-shot) with random gold answers."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench_sequential import SUBJECTS
    from bench_sequential import write_task as write_group

    rng = random.Random(seed)
    answers = {(f"{TASK}_{s}", i): rng.randrange(4) for s in SUBJECTS for i in range(docs // len(SUBJECTS))}
    write_group(folder, docs, answers, seed)
    return {"task": TASK, "questions": docs // len(SUBJECTS) * len(SUBJECTS), "subjects": len(SUBJECTS)}


def run_cli(args: list[str], scratch: Path, timeout: float, count_blocks: bool) -> dict:
    """`python -m layerprobe ARGS` (under the block counter when asked): wall seconds, exit code, output tail."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    counts_file = scratch / f"blocks-{time.monotonic_ns()}.json"
    if count_blocks:
        env["LP_GPU_CHECK_BLOCKS"] = str(counts_file)
        command = [sys.executable, "-c", COUNTING_LAUNCHER, *args]
    else:
        command = [sys.executable, "-m", "layerprobe", *args]
    log("$ layerprobe " + " ".join(args))
    started = time.perf_counter()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env, cwd=scratch)
    except subprocess.TimeoutExpired as expired:
        tail = str(expired.stderr or "")[-2000:]
        raise RuntimeError(f"timed out after {timeout:.0f}s (budget): {tail}") from None
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"exit {done.returncode}: {(done.stdout + done.stderr)[-3000:]}")
    record: dict = {"wall_seconds": seconds, "stdout_tail": done.stdout[-1500:]}
    if count_blocks and counts_file.is_file():
        record["block_work"] = json.loads(counts_file.read_text())
    return record


def angular_stage(model: Path, corpus: Path, out: Path, scratch: Path, args, timeout: float, device_map: bool) -> dict:
    """`angular` over --tokens of the corpus: seconds with and without loading, tokens/s."""
    cli = [
        "angular",
        str(model),
        "--tokens",
        str(args.tokens),
        "--dataset",
        str(corpus),
        "--seq-len",
        str(args.seq_len),
        "--batch-size",
        str(args.batch_size),
        "--out",
        str(out),
        "--quiet",
    ]
    cli += ["--device-map", "auto"] if device_map else ["--device", args.device]
    record = run_cli(cli, scratch, timeout, count_blocks=False)
    result = json.loads((out / "angular.json").read_text())
    rate = result["tokens_per_second"]
    record.update(
        tokens=result["data"]["tokens"],
        seq_len=result["data"]["seq_len"],
        windows=result["data"]["windows"],
        dtype=result["model"]["dtype"],
        device=result["run"]["device"],
        library_seconds=result["run"]["seconds"],
        measure_seconds=result["data"]["tokens"] / rate if rate else None,
        tokens_per_second=rate,
        nonfinite_tokens=result["nonfinite_tokens"],
    )
    return record


def documents_scored(result: dict) -> tuple[int, int]:
    """(documents scored, baseline included; what a full run scores), summed over the run's tasks."""
    scored = full = 0
    for task in result["tasks"].values():
        samples = task.get("samples") or 0
        metric = next(iter(task["metrics"].values()))
        variants = len(metric["layers"])
        items = metric.get("items") or [samples] * variants
        scored += samples + sum(items)
        full += samples * (variants + 1)
    return scored, full


def prune_stage(model: Path, tasks: Path, out: Path, scratch: Path, args, timeout: float, precision: float | None):
    """`prune-drop` on the MMLU-shaped group, 5-shot: seconds, documents scored, block work."""
    cli = [
        "prune-drop",
        str(model),
        "--task",
        TASK,
        "--include-path",
        str(tasks),
        "--num-fewshot",
        "5",
        "--batch-size",
        str(args.batch_size),
        "--device",
        args.device,
        "--out",
        str(out),
        "--quiet",
    ]
    if args.limit is not None:
        cli += ["--limit", str(args.limit)]
    if precision is not None:
        cli += ["--precision", str(precision)]
    record = run_cli(cli, scratch, timeout, count_blocks=True)
    result = json.loads((out / "prune_drop.json").read_text())
    scored, full = documents_scored(result)
    metric = result["tasks"][TASK]["metrics"]["acc"]
    record.update(
        engine=result["engine"],
        prefix_reuse=result["run"].get("prefix_reuse"),
        library_seconds=result["run"]["seconds"],
        device=result["run"]["device"],
        dtype=result["model"]["dtype"],
        samples=result["tasks"][TASK]["samples"],
        variants=len(metric["layers"]) + 1,
        documents_scored=scored,
        documents_full_run=full,
        baseline=metric["baseline"],
        stop=metric.get("stop"),
        items=metric.get("items"),
    )
    return record


# ------------------------------------------------------------------------------------------- reporting
def _fmt(value, spec: str = ",.1f") -> str:
    return "—" if value is None else format(value, spec)


def render(record: dict) -> str:
    """The markdown section for docs/performance.md: the device, then one row per stage."""
    stages = record.get("stages", {})
    env = stages.get("environment", {})
    gpu = env.get("gpu") or f"CPU ({env.get('platform')})"
    lines = [
        f"### gpu_check: {record.get('shape')} on {gpu} ({record.get('started_at', '')[:10]})",
        "",
        f"Device: {gpu}"
        + (f", {env.get('gpu_memory_gib')} GiB, {env.get('gpu_count')} GPU(s)" if env.get("gpu") else "")
        + f"; driver {env.get('driver') or '—'}, CUDA {env.get('cuda') or '—'}; torch {env.get('torch')}, "
        f"transformers {env.get('transformers')}, lm-eval {env.get('lm_eval') or '—'}, "
        f"accelerate {env.get('accelerate') or '—'}; Python {env.get('python')}. "
        f"Random weights, so the numbers are costs, not quality. Command: `{record.get('command')}`.",
        "",
    ]
    build = stages.get("checkpoint", {})
    if build.get("ok"):
        lines.append(
            f"Checkpoint: {build['parameters']:,} parameters, initialised on the device in "
            f"{build['init_seconds']:.1f} s, saved ({build['bytes_on_disk'] / 2**30:.1f} GiB) in "
            f"{build['save_seconds']:.1f} s."
        )
        lines.append("")
    lines += [
        "| stage | wall s (process) | s (library call) | s (measuring only) | tokens/s | documents scored | "
        "block passes | block × token | note |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name in ("angular", "angular-device-map", "prune-drop-seq", "prune-drop"):
        stage = stages.get(name)
        if stage is None:
            lines.append(f"| {name} | — | — | — | — | — | — | — | not run |")
            continue
        if not stage.get("ok"):
            why = str(stage.get("skipped") or stage.get("error", "failed")).splitlines()[0][:120].replace("|", "\\|")
            lines.append(f"| {name} | — | — | — | — | — | — | — | {why} |")
            continue
        work = stage.get("block_work") or {}
        docs = (
            f"{stage['documents_scored']:,} of {stage['documents_full_run']:,}" if "documents_scored" in stage else "—"
        )
        note = f"{stage.get('device')}, {stage.get('dtype')}"
        if "engine" in stage:
            note += f", engine {stage['engine']}, {stage['samples']} questions × {stage['variants']} variants"
        if "tokens" in stage:
            note += f", {stage['tokens']:,} tokens, seq-len {stage['seq_len']}"
        lines.append(
            f"| {name} | {_fmt(stage.get('wall_seconds'))} | {_fmt(stage.get('library_seconds'))} | "
            f"{_fmt(stage.get('measure_seconds'))} | {_fmt(stage.get('tokens_per_second'), ',.0f')} | {docs} | "
            f"{_fmt(work.get('passes'), ',')} | {_fmt(work.get('block_tokens'), ',')} | {note} |"
        )
    seq, full = stages.get("prune-drop-seq", {}), stages.get("prune-drop", {})
    if seq.get("ok") and full.get("ok"):
        lines += [
            "",
            f"`--precision {record.get('precision')}` against the full run: documents "
            f"{seq['documents_scored'] / full['documents_scored']:.3f}×, wall time (library call) "
            f"{seq['library_seconds'] / full['library_seconds']:.3f}×"
            + (
                f", block × token {seq['block_work']['block_tokens'] / full['block_work']['block_tokens']:.3f}×."
                if seq.get("block_work") and full.get("block_work") and full["block_work"]["block_tokens"]
                else "."
            ),
        ]
    lines.append(f"\nTotal: {record.get('total_seconds', 0):.0f} s.\n")
    return "\n".join(lines)


def save(record: dict, out: Path) -> None:
    """gpu_check.json and gpu_check.md, rewritten whole after every stage (the last complete state survives)."""
    record["total_seconds"] = time.perf_counter() - START
    for name, text in (("gpu_check.json", json.dumps(record, indent=2) + "\n"), ("gpu_check.md", render(record))):
        partial = out / (name + ".tmp")
        partial.write_text(text)
        partial.replace(out / name)


def append_section(markdown: str, target: Path) -> None:
    with target.open("a") as handle:
        handle.write("\n" + markdown)
    log(f"appended the section to {target}")


# ------------------------------------------------------------------------------------------------ main
def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", choices=sorted(SHAPES), default="llama2-7b")
    parser.add_argument("--device", help="cuda (default when present) or cpu")
    parser.add_argument("--dtype", help="weights' dtype (default: bfloat16 on CUDA, float32 on CPU)")
    parser.add_argument("--out", type=Path, default=Path("gpu-check-out"), help="gpu_check.json/.md go here")
    parser.add_argument("--scratch", type=Path, help="checkpoint and runs (default: a folder under /tmp)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch folder (the checkpoint)")
    parser.add_argument("--budget-s", type=float, default=420.0, help="skip stages once this many seconds passed")
    parser.add_argument("--tokens", type=int, help="angular tokens (default: the shape's)")
    parser.add_argument("--seq-len", type=int, help="angular window (default: the shape's)")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--docs", type=int, help="questions in the MMLU-shaped task (default: the shape's)")
    parser.add_argument("--limit", type=float, help="prune-drop --limit (documents per subject)")
    parser.add_argument("--precision", type=float, default=0.05)
    parser.add_argument("--stages", default="angular,angular-device-map,prune-drop-seq,prune-drop")
    parser.add_argument("--append-to", type=Path, help="append the markdown section to this file at the end")
    parser.add_argument("--render", type=Path, help="only render this gpu_check.json (with --append-to)")
    args = parser.parse_args()

    if args.render:
        markdown = render(json.loads(args.render.read_text()))
        print(markdown)
        if args.append_to:
            append_section(markdown, args.append_to)
        return 0

    import torch

    shape = SHAPES[args.shape]
    args.device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    args.dtype = args.dtype or ("bfloat16" if args.device.startswith("cuda") else "float32")
    args.tokens = args.tokens or shape["tokens"]
    args.seq_len = args.seq_len or shape["seq_len"]
    args.docs = args.docs or shape["docs"]
    args.out.mkdir(parents=True, exist_ok=True)
    scratch = args.scratch or Path(f"/tmp/lp-gpu-check-{os.getpid()}")
    scratch.mkdir(parents=True, exist_ok=True)
    record: dict = {
        "schema": "layerprobe-bench/gpu-check@1",
        "started_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": "python benchmarks/gpu_check.py " + " ".join(sys.argv[1:]),
        "shape": args.shape,
        "config": {**shape, "vocab": 32000, "dtype": args.dtype},
        "tokens": args.tokens,
        "seq_len": args.seq_len,
        "batch_size": args.batch_size,
        "docs": args.docs,
        "limit": args.limit,
        "precision": args.precision,
        "budget_s": args.budget_s,
        "stages": {},
    }
    stages = record["stages"]

    def stage(name: str, work) -> dict | None:
        left = args.budget_s - (time.perf_counter() - START)
        if left < 5:
            stages[name] = {"ok": False, "skipped": f"budget spent ({args.budget_s:.0f}s)"}
            log(f"{name}: skipped, budget spent")
            save(record, args.out)
            return None
        log(f"{name}: start ({left:.0f}s of budget left)")
        try:
            stages[name] = {"ok": True, **work(left)}
            log(f"{name}: done")
        except Exception as error:  # one failure must not lose the other stages
            stages[name] = {"ok": False, "error": f"{type(error).__name__}: {error}", "trace": traceback.format_exc()}
            log(f"{name}: FAILED {type(error).__name__}: {str(error)[:500]}")
        save(record, args.out)
        return stages[name]

    stage("environment", lambda left: environment(args.device))
    log(f"environment: {json.dumps(stages['environment'])}")
    model = scratch / "model"
    built = stage("checkpoint", lambda left: build_checkpoint(model, shape, args.device, args.dtype))
    if built and built["ok"]:
        stage("corpus", lambda left: write_corpus(scratch / "corpus.jsonl", model, args.tokens))
        stage("task", lambda left: write_task(scratch / "tasks", args.docs, seed=0))
        wanted = args.stages.split(",")
        runs = {
            "angular": lambda left: angular_stage(
                model, scratch / "corpus.jsonl", scratch / "angular", scratch, args, left, device_map=False
            ),
            "angular-device-map": lambda left: angular_stage(
                model, scratch / "corpus.jsonl", scratch / "angular-map", scratch, args, left, device_map=True
            ),
            "prune-drop-seq": lambda left: prune_stage(
                model, scratch / "tasks", scratch / "prune-seq", scratch, args, left, precision=args.precision
            ),
            "prune-drop": lambda left: prune_stage(
                model, scratch / "tasks", scratch / "prune-full", scratch, args, left, precision=None
            ),
        }
        for name, work in runs.items():
            if name in wanted:
                stage(name, work)
    save(record, args.out)
    markdown = render(record)
    print(markdown, flush=True)
    if args.append_to:
        append_section(markdown, args.append_to)
    if not args.keep:
        shutil.rmtree(scratch, ignore_errors=True)
    failed = [name for name, s in stages.items() if not s.get("ok")]
    log(f"finished in {time.perf_counter() - START:.0f}s; failed or skipped: {', '.join(failed) or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
