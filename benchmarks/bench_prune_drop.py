"""What do the shared-prefix engine and its prefix reuse save over the simple engine in `prune-drop`?

Runs `run_prune_drop` three ways in one process on the same loaded model, tasks and settings:
  simple   one full lm-eval evaluation per variant (baseline, then each block removed in turn);
  plain    the shared engine with --no-prefix-reuse: one baseline pass per batch records every block's
           input x^l; "block l removed" then runs only blocks l+1 … L-1 and the head from x^l;
  shared   the shared engine as by default: besides, a prompt prefix many requests share (the few-shot
           examples) is run once per (prefix, variant) and only the rest of each request runs.
Prints the wall time of each (minimum over --repeat rounds, engines in rotating order; the process's CPU
time of the last round beside it, a check when other work shares the machine) and the block
work each did, as Progress's block events report it: block-tokens (rows × padded length of every
block pass; probes included) and rows, with the ratios to the simple engine, next to the theory
for the plain shared engine:
  block rows      simple L + L(L-1) = L², plain L + Σ(L-1-l) = L(L+1)/2  → ratio (L+1)/(2L)
Targets on an MMLU-shaped 5-shot task (the default): shared block-tokens ≤ 0.25×, wall ≤ 0.30× simple.
Asserts nothing. No network: the model is a LLaMA-shaped random checkpoint built here (or --model PATH)
with a byte-level BPE tokenizer trained on the stdlib's pydoc text; the tasks are the local lm-eval
tasks of tests/data/tasks (lp_mmlu: MMLU-shaped group, 5 dev questions per subject for few-shot).

    python benchmarks/bench_prune_drop.py                       # 8 layers, hidden 384, lp_mmlu 5-shot, limit 20
    python benchmarks/bench_prune_drop.py --layers 12 --hidden 512 --limit 20
    python benchmarks/bench_prune_drop.py --model /path/to/causal-lm --tasks lp_arc_like --num-fewshot 0 --profile
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
import transformers as tf  # noqa: E402

from layerprobe.core import ModelSpec, PruneSpec  # noqa: E402
from layerprobe.model import (  # noqa: E402
    BlockEvent,
    Progress,
    find_layers,  # noqa: E402
    load_model,  # noqa: E402
)
from layerprobe.prune import run_prune_drop  # noqa: E402

TASKS_DIR = Path(__file__).resolve().parent.parent / "tests" / "data" / "tasks"


def build_tokenizer(vocab_size: int):
    """A byte-level BPE trained on the stdlib's pydoc topics: real tokenization, no download."""
    from pydoc_data.topics import topics

    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE(unk_token=None))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<pad>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(list(topics.values()), trainer)
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", tokenizer.token_to_id("<s>"))]
    )
    return tf.PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>", pad_token="<pad>")


def build_model(directory: Path, layers: int, hidden: int, vocab_size: int) -> Path:
    tokenizer = build_tokenizer(vocab_size)
    heads = max(1, hidden // 64)
    config = tf.LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=hidden * 3,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=1024,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
        architectures=["LlamaForCausalLM"],
    )
    torch.manual_seed(0)
    tf.LlamaForCausalLM(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


ENGINES = {
    "simple": dict(engine="simple"),
    "plain": dict(engine="shared", prefix_reuse=False),
    "shared": dict(engine="shared"),
}


def run_engine(name: str, spec_args: dict, loaded, out: Path, profile: bool):
    """Wall time, result, the block work Progress reported (every block pass of the evaluations), profiler."""
    seen = {"rows": 0, "tokens": 0}

    def count(event: BlockEvent) -> None:
        seen["rows"] += event.rows
        seen["tokens"] += event.tokens

    profiler = cProfile.Profile() if profile else None
    start, cpu = time.perf_counter(), time.process_time()
    if profiler:
        profiler.enable()
    spec = PruneSpec(**dict(spec_args, **ENGINES[name]))
    result = run_prune_drop(spec, out, loaded=loaded, progress=Progress(on_block=count))
    if profiler:
        profiler.disable()
    seconds = time.perf_counter() - start
    return seconds, result, dict(seen, cpu=time.process_time() - cpu), profiler


def max_relative_difference(a, b) -> float:
    worst = 0.0
    for task, drop in a.tasks.items():
        for metric, x in drop.metrics.items():
            y = b.tasks[task].metrics[metric]
            for p, q in zip([x.baseline, *x.pruned], [y.baseline, *y.pruned], strict=True):
                worst = max(worst, abs(p - q) / max(abs(p), abs(q), 1e-12))
    return worst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, help="a local causal-LM checkpoint (default: build one)")
    parser.add_argument("--layers", type=int, default=8, help="blocks of the built model")
    parser.add_argument("--hidden", type=int, default=384, help="hidden size of the built model")
    parser.add_argument("--vocab", type=int, default=4096, help="BPE vocabulary of the built model")
    parser.add_argument("--tasks", default="lp_mmlu", help="comma-separated lm-eval tasks")
    parser.add_argument("--include-path", type=Path, default=TASKS_DIR, help="folder of task YAMLs")
    parser.add_argument("--limit", type=float, default=20, help="documents per task")
    parser.add_argument("--num-fewshot", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    parser.add_argument(
        "--repeat",
        type=int,
        default=3,
        help="timed rounds (engines alternate); the minimum is reported, robust to other load on the machine",
    )
    parser.add_argument(
        "--unit",
        default="block",
        help="prune-drop --unit to measure (block, attention, mlp); run once per unit to compare their ratios",
    )
    parser.add_argument("--profile", action="store_true", help="print cProfile's top entries of both runs")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    with tempfile.TemporaryDirectory() as tmp:
        path = args.model or build_model(Path(tmp) / "model", args.layers, args.hidden, args.vocab)
        loaded = load_model(ModelSpec(str(path), device=args.device), purpose="head")
        L = find_layers(loaded.model).num_layers
        spec_args = dict(
            model=loaded.spec,
            tasks=tuple(args.tasks.split(",")),
            limit=args.limit,
            num_fewshot=args.num_fewshot,
            batch_size=args.batch_size,
            include_path=str(args.include_path),
            unit=args.unit,
        )
        # Warm-up: imports, dataset loading and first-call costs are paid here, by no engine.
        for name in ENGINES:
            run_prune_drop(
                PruneSpec(**dict(spec_args, limit=1, layers="0", **ENGINES[name])),
                Path(tmp) / f"warm-{name}",
                loaded=loaded,
            )
        names = list(ENGINES)
        times: dict[str, list[float]] = {name: [] for name in names}
        runs = {}
        for round_ in range(max(1, args.repeat)):
            for name in names[round_ % 3 :] + names[: round_ % 3]:
                runs[name] = run_engine(
                    name, spec_args, loaded, Path(tmp) / f"{name}-{round_}", args.profile and round_ == 0
                )
                times[name].append(runs[name][0])

    best = {name: min(times[name]) for name in names}
    work = {name: runs[name][2] for name in names}
    params = sum(p.numel() for p in loaded.model.parameters())
    print(
        f"model: {path if args.model else 'built LLaMA'}  L={L}  hidden={loaded.model.config.hidden_size}  "
        f"params={params / 1e6:.1f}M  device={loaded.device_label}  threads={torch.get_num_threads()}"
    )
    print(
        f"tasks: {args.tasks}  limit={args.limit:g}  num_fewshot={args.num_fewshot}  "
        f"unit={args.unit}  batch_size={args.batch_size}  variants={L + 1}"
    )
    print("engine reported: " + ", ".join(f"{name} run -> {runs[name][1].engine}" for name in names))
    print(f"prefix reuse (run.prefix_reuse): shared run -> {runs['shared'][1].run.prefix_reuse}")
    print()
    print(
        f"{'':8}{'wall s (min)':>13}{'x simple':>10}{'block-tokens':>14}{'x simple':>10}{'block rows':>12}"
        f"{'cpu s':>9}   all rounds (wall s)"
    )
    for name in names:
        print(
            f"{name:8}{best[name]:13.2f}{best[name] / best['simple']:10.3f}{work[name]['tokens']:14,}"
            f"{work[name]['tokens'] / work['simple']['tokens']:10.3f}{work[name]['rows']:12,}"
            f"{work[name]['cpu']:9.1f}   " + ", ".join(f"{t:.2f}" for t in times[name])
        )
    print()
    print(
        f"shared/simple:  wall time ratio {best['shared'] / best['simple']:.3f} (target <= 0.30),  "
        f"block-token ratio {work['shared']['tokens'] / work['simple']['tokens']:.3f} (target <= 0.25)"
    )
    print(
        f"plain/simple block rows ratio {work['plain']['rows'] / work['simple']['rows']:.3f}, "
        f"theory (L+1)/(2L) = {(L + 1) / (2 * L):.3f} (plus the engines' one-row probes)"
    )
    worst = max(max_relative_difference(runs["simple"][1], runs[name][1]) for name in ("plain", "shared"))
    print(f"max relative difference of any metric between engines: {worst:.2e}")
    for name in names:
        profiler = runs[name][3]
        if profiler:
            text = io.StringIO()
            pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(15)
            print(f"\n---- cProfile, {name} engine, top 15 by own time ----")
            print(text.getvalue()[-6000:])


if __name__ == "__main__":
    main()
