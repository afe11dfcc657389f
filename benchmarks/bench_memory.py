"""Peak memory and speed of `angular` and `prune-drop`, next to a bare forward pass, at any model shape.

Each measurement runs in its own fresh process, so its peak is its own:
  forward     a bare forward pass of the base model over the windows (the floor any measurement pays),
  angular     `angular.measure` over the same windows (hooks + the (L+1)×(L+1) accumulator),
  prune-drop  `run_prune_drop` on the MMLU-shaped local task (tests/data/tasks/lp_mmlu), per --engines.
Peak memory: on CUDA `torch.cuda.max_memory_allocated` above what was allocated before the work; on CPU
the process's peak RSS (`ru_maxrss`) above its RSS before the work (a high-water mark: if loading peaked
higher, the delta reads 0 and the true work peak is below the load peak). Next to it, the states the
code holds at once by construction (see docs/performance.md, "Memory and scale").

The model is a random-weight LLaMA built from a config (`--shape`), saved once to --workdir, and loaded
through layerprobe's own loader, so --load-in-4bit/--device-map/--max-state-memory take the real path.
The tokenizer is a byte-level BPE trained on the stdlib's pydoc text (no network); the config keeps the
shape's vocabulary size. No network anywhere.

    python benchmarks/bench_memory.py                                   # CPU, small shape, all measurements
    python benchmarks/bench_memory.py --shape llama2-7b --device cuda --dtype bfloat16 --tokens 262144 \\
        --seq-len 4096 --batch-size 4 --workdir /scratch/lp7b
    python benchmarks/bench_memory.py --shape llama2-70b --layers 16 --load-in-4bit --device cuda \\
        --workdir /scratch/lp70b                                        # 70B-wide blocks, 16 of the 80
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # this checkout's layerprobe, also when another one is installed
TASKS_DIR = ROOT / "tests" / "data" / "tasks"

# Published LLaMA-2 shapes (hidden, intermediate, layers, heads, kv heads, vocab); "small" runs on a laptop CPU.
SHAPES = {
    "tiny": (64, 192, 4, 2, 2, 32000),
    "small": (512, 1536, 8, 8, 8, 32000),
    "llama2-7b": (4096, 11008, 32, 32, 32, 32000),
    "llama2-13b": (5120, 13824, 40, 40, 40, 32000),
    "llama2-70b": (8192, 28672, 80, 64, 8, 32000),
}


def llama_config(shape: str, layers: int | None):
    import transformers as tf

    hidden, intermediate, num_layers, heads, kv_heads, vocab = SHAPES[shape]
    return tf.LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=layers or num_layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=4096,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
        architectures=["LlamaForCausalLM"],
        dtype="bfloat16",
    )


def build_tokenizer():
    """A 4096-token byte-level BPE trained on the stdlib's pydoc topics (ids stay below any LLaMA vocab)."""
    from pydoc_data.topics import topics

    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE(unk_token=None))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=4096, special_tokens=["<pad>", "<s>", "</s>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tokenizer.train_from_iterator(list(topics.values()), trainer)
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", tokenizer.token_to_id("<s>"))]
    )
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>", pad_token="<pad>")


def build_checkpoint(directory: Path, shape: str, layers: int | None) -> Path:
    """Random weights in bfloat16, written in shards; skipped when the directory already holds this shape."""
    import transformers as tf

    config = llama_config(shape, layers)
    marker = directory / "layerprobe-bench.json"
    wanted = {"shape": shape, "layers": config.num_hidden_layers}
    if marker.is_file() and json.loads(marker.read_text()) == wanted:
        return directory
    directory.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    model = tf.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    with torch.no_grad():  # random init gives huge logits at depth; small weights keep states finite
        for name, param in model.named_parameters():
            if "norm" not in name:
                param.normal_(0.0, 0.02)
    model.save_pretrained(directory, max_shard_size="2GB")
    build_tokenizer().save_pretrained(directory)
    marker.write_text(json.dumps(wanted))
    return directory


# ------------------------------------------------------------------------------------------ children
def _rss_bytes() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # kilobytes on Linux


def _model_spec(args, path: Path):
    from layerprobe.core import ModelSpec, quantization_from_flags

    return ModelSpec(
        str(path),
        dtype=args.dtype,
        device=args.device,
        device_map="auto" if args.device_map_auto else None,
        quantization=quantization_from_flags(args.load_in_4bit, args.load_in_8bit),
    )


def child(kind: str, args, path: Path) -> dict:
    """One measurement in this (fresh) process; returns its numbers."""
    from layerprobe.core import (
        BUILTIN_CORPUS,
        DEFAULT_CHUNK_BYTES,
        DEFAULT_STATE_BYTES,
        CorpusSpec,
        parse_memory_size,
    )
    from layerprobe.data import batches, build_windows, iter_documents
    from layerprobe.measure.angular import measure
    from layerprobe.model import find_layers, load_model

    cuda = args.device.startswith("cuda") or args.device_map_auto and torch.cuda.is_available()
    spec = _model_spec(args, path)
    loaded = load_model(spec, purpose="head" if kind.startswith("prune-drop") else "base")
    stack = find_layers(loaded.model)
    L, hidden = stack.num_layers, loaded.model.config.hidden_size
    itemsize = loaded.model.get_input_embeddings().weight.element_size()
    bound = parse_memory_size(args.max_state_memory)
    # The pydoc text, repeated as often as --tokens needs (speed and memory do not care what the text is).
    documents = (text for _ in range(64) for text in iter_documents(CorpusSpec(BUILTIN_CORPUS)))
    windows = build_windows(loaded.tokenizer, documents, args.tokens, args.seq_len)
    seq = len(windows[0].input_ids)
    tokens = sum(len(w.input_ids) for w in windows)

    def work() -> dict:
        if kind == "forward":
            with torch.inference_mode():
                for group in batches(windows, args.batch_size):
                    ids = torch.tensor([w.input_ids for w in group], device=loaded.input_device)
                    loaded.model(input_ids=ids, use_cache=False)
            return {"states_held": 0}
        if kind == "angular":
            measure(loaded, stack, windows, "all", args.batch_size, max_state_bytes=bound or DEFAULT_CHUNK_BYTES)
            captured = (L + 1) * args.batch_size * seq * hidden * itemsize
            chunk = min(bound or DEFAULT_CHUNK_BYTES, DEFAULT_CHUNK_BYTES)
            return {"states_held": captured + min(chunk, (L + 1) * args.batch_size * seq * hidden * 4)}
        from layerprobe.core import PruneSpec
        from layerprobe.prune import run_prune_drop

        engine = kind.split(":")[1]
        prune_spec = PruneSpec(
            model=spec,
            tasks=("lp_mmlu",),
            layers=args.prune_layers,
            limit=args.limit,
            num_fewshot=5,
            batch_size=args.batch_size,
            include_path=str(TASKS_DIR),
            engine=engine,
            max_state_bytes=bound or DEFAULT_STATE_BYTES,
        )
        with tempfile.TemporaryDirectory() as out:
            result = run_prune_drop(prune_spec, Path(out), loaded=loaded)
        variants = len(result.settings["layers"]) + 1
        return {"variants": variants, "engine": result.engine, "states_held": None}

    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
    rss_before = _rss_bytes()
    start = time.perf_counter()
    numbers = work()
    if cuda:
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    numbers.update(
        kind=kind,
        seconds=seconds,
        tokens=tokens,
        seq_len=seq,
        num_layers=L,
        hidden=hidden,
        rss_before=rss_before,
        peak_rss_delta=max(0, _peak_rss_bytes() - rss_before),
        cuda_peak_delta=(torch.cuda.max_memory_allocated() - before) if cuda else None,
        device=str(loaded.input_device) + (" (device_map=auto)" if spec.device_map else ""),
        quantization=loaded.quantization,
    )
    return numbers


# ------------------------------------------------------------------------------------------- parent
def _mib(value) -> str:
    return "—" if value is None else f"{value / 2**20:,.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", choices=sorted(SHAPES), default="small")
    parser.add_argument("--layers", type=int, help="number of blocks (default: the shape's)")
    parser.add_argument("--model", type=Path, help="an existing checkpoint instead of a random one")
    parser.add_argument("--workdir", type=Path, help="where the random checkpoint is written (default: a temp dir)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--device-map-auto", action="store_true", help="load with --device-map auto")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--load-in-4bit", action="store_true")
    parser.add_argument("--load-in-8bit", action="store_true")
    parser.add_argument("--tokens", type=int, default=8192)
    parser.add_argument("--seq-len", type=int, default=512)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--max-state-memory", help="the --max-state-memory bound, e.g. 64MiB (default: each's)")
    parser.add_argument("--limit", type=float, default=4, help="prune-drop: documents per MMLU-shaped subtask")
    parser.add_argument("--prune-layers", default=None, help="prune-drop: blocks to remove (default: all)")
    parser.add_argument("--engines", default="shared,simple", help="prune-drop engines to measure")
    parser.add_argument("--what", default="forward,angular,prune-drop", help="measurements to run")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--path", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.child:
        print("RESULT " + json.dumps(child(args.child, args, args.path)))
        return

    with tempfile.TemporaryDirectory() as tmp:
        path = args.model or build_checkpoint(args.workdir or Path(tmp) / "model", args.shape, args.layers)
        kinds = []
        for what in args.what.split(","):
            kinds += [f"prune-drop:{e}" for e in args.engines.split(",")] if what == "prune-drop" else [what]
        rows = []
        for kind in kinds:
            command = [sys.executable, __file__, *sys.argv[1:], "--child", kind, "--path", str(path)]
            done = subprocess.run(command, capture_output=True, text=True)
            if done.returncode != 0:
                sys.exit(f"{kind} failed:\n{done.stderr[-3000:]}")
            line = next(x for x in done.stdout.splitlines() if x.startswith("RESULT "))
            rows.append(json.loads(line[len("RESULT ") :]))

    first = rows[0]
    print(
        f"shape={args.shape} L={first['num_layers']} hidden={first['hidden']} dtype={args.dtype} "
        f"quantization={first['quantization']} device={first['device']} tokens={first['tokens']} "
        f"seq_len={first['seq_len']} batch={args.batch_size} threads={torch.get_num_threads()}"
    )
    print(f"{'measurement':<20} {'seconds':>9} {'tokens/s':>10} {'s/variant':>10} {'peak Δ MiB':>11} {'held MiB':>9}")
    floor = next((r for r in rows if r["kind"] == "forward"), None)
    for row in rows:
        peak = row["cuda_peak_delta"] if row["cuda_peak_delta"] is not None else row["peak_rss_delta"]
        per_variant = f"{row['seconds'] / row['variants']:.2f}" if row.get("variants") else "—"
        rate = f"{row['tokens'] / row['seconds']:,.0f}" if not row.get("variants") else "—"
        print(
            f"{row['kind']:<20} {row['seconds']:>9.2f} {rate:>10} {per_variant:>10} {_mib(peak):>11} "
            f"{_mib(row['states_held']):>9}"
        )
    angular = next((r for r in rows if r["kind"] == "angular"), None)
    if floor and angular:
        print(f"angular / bare forward wall time: {angular['seconds'] / floor['seconds']:.3f}")


if __name__ == "__main__":
    main()
