"""What does the shared-prefix engine save over the simple one in `prune-drop`?

Runs `run_prune_drop` twice in one process on the same loaded model, tasks and settings:
  simple   one full lm-eval evaluation per variant (baseline, then each block removed in turn),
  shared   one baseline pass per batch that records every block's input x^l; "block l removed" then
           runs only blocks l+1 … L-1 and the head from the recorded x^l.
Prints the wall time of each (minimum over --repeat alternating rounds), the ratio shared/simple
(target ≤ 0.6 on CPU), and the block forward passes each made, in batch rows as Progress's block
events report them, next to the theory:
  block rows      simple L + L(L-1) = L², shared L + Σ(L-1-l) = L(L+1)/2  → ratio (L+1)/(2L)
  forward passes  simple L+1, shared (L+2)/2 (embedding + head counted as one block) → (L+2)/(2(L+1))
With --units (default block,attention) each unit is measured the same way and the ratios are printed
side by side: an ablated sublayer keeps block l, so the shared engine runs blocks l … L-1 per variant:
  block rows      simple L + L·L, shared L + Σ(L-l) = L + L(L+1)/2 → ratio (L+3)/(2(L+1))
Asserts nothing. No network: the model is a LLaMA-shaped random checkpoint built here (or --model PATH)
with a byte-level BPE tokenizer trained on the stdlib's pydoc text; the tasks are the local lm-eval
tasks of tests/data/tasks (MMLU-shaped group with few-shot, ARC-shaped).

    python benchmarks/bench_prune_drop.py                       # 8 layers, hidden 384, limit 10, 2-shot
    python benchmarks/bench_prune_drop.py --layers 12 --hidden 512 --limit 20
    python benchmarks/bench_prune_drop.py --model /path/to/causal-lm --tasks lp_arc_like --profile
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

from layerprobe.layers import find_layers  # noqa: E402
from layerprobe.models import load_model  # noqa: E402
from layerprobe.progress import BlockEvent, Progress  # noqa: E402
from layerprobe.prune import run_prune_drop  # noqa: E402
from layerprobe.specs import ModelSpec, PruneSpec  # noqa: E402

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


def run_engine(engine: str, spec_args: dict, loaded, out: Path, profile: bool):
    """Wall time, result and the block rows Progress reported (every block pass of the evaluations)."""
    rows = {"count": 0}

    def count(event: BlockEvent) -> None:
        rows["count"] += event.rows

    profiler = cProfile.Profile() if profile else None
    start = time.perf_counter()
    if profiler:
        profiler.enable()
    result = run_prune_drop(
        PruneSpec(engine=engine, **spec_args), out, loaded=loaded, progress=Progress(on_block=count)
    )
    if profiler:
        profiler.disable()
    seconds = time.perf_counter() - start
    return seconds, result, rows["count"], profiler


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
    parser.add_argument("--tasks", default="lp_mmlu,lp_arc_like", help="comma-separated lm-eval tasks")
    parser.add_argument("--include-path", type=Path, default=TASKS_DIR, help="folder of task YAMLs")
    parser.add_argument("--limit", type=float, default=10, help="documents per task")
    parser.add_argument("--num-fewshot", type=int, default=2)
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
        "--units", default="block,attention", help="comma-separated --unit values to measure (block, attention, mlp)"
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
        )
        units = args.units.split(",")
        # Warm-up: imports, dataset loading and first-call costs are paid here, by neither engine.
        for engine in ("simple", "shared"):
            run_prune_drop(
                PruneSpec(engine=engine, **dict(spec_args, limit=1, layers="0")),
                Path(tmp) / f"warm-{engine}",
                loaded=loaded,
            )
        measured = {}
        for unit in units:
            unit_args = dict(spec_args, unit=unit)
            times: dict[str, list[float]] = {"simple": [], "shared": []}
            runs = {}
            for round_ in range(max(1, args.repeat)):
                order = ("simple", "shared") if round_ % 2 == 0 else ("shared", "simple")
                for engine in order:
                    runs[engine] = run_engine(
                        engine,
                        unit_args,
                        loaded,
                        Path(tmp) / f"{unit}-{engine}-{round_}",
                        args.profile and round_ == 0 and unit == units[0],
                    )
                    times[engine].append(runs[engine][0])
            measured[unit] = (times, runs)

    params = sum(p.numel() for p in loaded.model.parameters())
    print(
        f"model: {path if args.model else 'built LLaMA'}  L={L}  hidden={loaded.model.config.hidden_size}  "
        f"params={params / 1e6:.1f}M  device={loaded.device_label}  threads={torch.get_num_threads()}"
    )
    print(
        f"tasks: {args.tasks}  limit={args.limit:g}  num_fewshot={args.num_fewshot}  "
        f"batch_size={args.batch_size}  variants={L + 1}"
    )
    ratios = {}
    for unit, (times, runs) in measured.items():
        (_, simple, rows_simple, prof_simple) = runs["simple"]
        (_, shared, rows_shared, prof_shared) = runs["shared"]
        t_simple, t_shared = min(times["simple"]), min(times["shared"])
        ratios[unit] = t_shared / t_simple
        print(f"\n==== --unit {unit} ====")
        print(f"engine reported: simple run -> {simple.engine}, shared run -> {shared.engine}")
        print(f"{'':8}{'wall s (min)':>13}{'block rows':>12}   all rounds")
        print(f"{'simple':8}{t_simple:13.2f}{rows_simple:12,}   {', '.join(f'{t:.2f}' for t in times['simple'])}")
        print(
            f"{'shared':8}{t_shared:13.2f}{rows_shared:12,}   {', '.join(f'{t:.2f}' for t in times['shared'])}"
            f"   (incl. one {L}-row probe of the blocks' outputs)"
        )
        print(f"wall time ratio shared/simple:   {t_shared / t_simple:.3f}   (target <= 0.6)")
        # A removed block skips block l; an ablated sublayer still runs block l (with one branch zeroed).
        theory = (L + 1) / (2 * L) if unit == "block" else (L + 3) / (2 * (L + 1))
        formula = "(L+1)/(2L)" if unit == "block" else "(L+3)/(2(L+1))"
        if rows_shared:
            print(f"block rows ratio shared/simple:  {rows_shared / rows_simple:.3f}   theory {formula} = {theory:.3f}")
        print(f"max relative difference of any metric between engines: {max_relative_difference(simple, shared):.2e}")
    if len(ratios) > 1:
        print("\nwall time ratio shared/simple, side by side: " + "   ".join(f"{u} {r:.3f}" for u, r in ratios.items()))
    (_, _, _, prof_simple), (_, _, _, prof_shared) = measured[units[0]][1]["simple"], measured[units[0]][1]["shared"]
    for name, profiler in (("simple", prof_simple), ("shared", prof_shared)):
        if profiler:
            text = io.StringIO()
            pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(15)
            print(f"\n---- cProfile, {name} engine, top 15 by own time ----")
            print(text.getvalue()[-6000:])


if __name__ == "__main__":
    main()
