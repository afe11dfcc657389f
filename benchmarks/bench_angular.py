"""How much does the one-pass angular matrix cost on top of a bare forward pass?

Times, side by side in one process over the same token windows:
  floor     a bare forward pass of the base model (what any measurement must pay),
  layerprobe `angular.measure`: the same pass with block-input hooks and the (L+1)×(L+1) accumulator,
  per-span  the reference scripts' approach: one pass per span n (with output_hidden_states), L passes.
Prints the ratios layerprobe/floor (target ≤ 1.25) and per-span/layerprobe. No network: the model is a
LLaMA-shaped random checkpoint built here (or --model PATH), the text the stdlib's pydoc topics.

    python benchmarks/bench_angular.py                # defaults: 8 layers, hidden 512, 16K tokens
    python benchmarks/bench_angular.py --model /path/to/checkpoint --tokens 32768
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time
from pathlib import Path

import torch
import transformers as tf

from layerprobe.core import BUILTIN_CORPUS, CorpusSpec, ModelSpec
from layerprobe.data import batches, build_windows, iter_documents
from layerprobe.measure.angular import measure
from layerprobe.model import find_layers, load_model


def build_model(directory: Path, layers: int, hidden: int) -> Path:
    tokenizer = tf.AutoTokenizer.from_pretrained(_minilm_or_fail())
    config = tf.LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=hidden * 3,
        num_hidden_layers=layers,
        num_attention_heads=max(1, hidden // 64),
        num_key_value_heads=max(1, hidden // 64),
        max_position_embeddings=1024,
    )
    torch.manual_seed(0)
    tf.LlamaModel(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def _minilm_or_fail() -> Path:
    from layerprobe.model import demo_model_dir

    return demo_model_dir()  # a real WordPiece tokenizer that needs no network


def bare_forward(model, windows, batch_size: int) -> None:
    with torch.inference_mode():
        for group in batches(windows, batch_size):
            model(input_ids=torch.tensor([w.input_ids for w in group]), use_cache=False)


def per_span(model, windows, batch_size: int, num_layers: int) -> None:
    """The reference scripts: for each span n, a pass over the corpus and d(x^l, x^(l+n)) for every l."""
    with torch.inference_mode():
        for n in range(1, num_layers + 1):
            for group in batches(windows, batch_size):
                out = model(
                    input_ids=torch.tensor([w.input_ids for w in group]), output_hidden_states=True, use_cache=False
                )
                states = out.hidden_states
                for l in range(num_layers - n + 1):
                    a, b = states[l].float(), states[l + n].float()
                    cos = torch.nn.functional.cosine_similarity(a, b, dim=-1).clamp(-1, 1)
                    (torch.arccos(cos) / math.pi).double().sum()


def best_of(repeats: int, *fns) -> list[float]:
    """Minimum wall time of each function, run in alternation so that drift affects all alike."""
    times = [[] for _ in fns]
    for _ in range(repeats):
        for slot, fn in zip(times, fns, strict=True):
            start = time.perf_counter()
            fn()
            slot.append(time.perf_counter() - start)
    return [min(slot) for slot in times]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, help="checkpoint dir (default: build a random LLaMA)")
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--tokens", type=int, default=16_384)
    parser.add_argument("--seq-len", type=int, default=512)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip-per-span", action="store_true", help="skip the slow one-pass-per-span timing")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        path = args.model or build_model(Path(tmp) / "model", args.layers, args.hidden)
        loaded = load_model(ModelSpec(str(path), device="cpu", dtype="float32"))
        stack = find_layers(loaded.model)
        windows = build_windows(
            loaded.tokenizer,
            iter_documents(CorpusSpec(BUILTIN_CORPUS)),
            args.tokens,
            min(args.seq_len, loaded.context_length or args.seq_len),
        )
        model, L = loaded.model, stack.num_layers
        bare_forward(model, windows[:1], 1)  # warm-up
        floor, ours = best_of(
            args.repeats,
            lambda: bare_forward(model, windows, args.batch_size),
            lambda: measure(loaded, stack, windows, "all", args.batch_size),
        )
        print(
            f"model: {path}  L={L}  tokens={args.tokens}  seq_len={len(windows[0].input_ids)}  "
            f"batch={args.batch_size}  threads={torch.get_num_threads()}"
        )
        print(f"bare forward (floor):        {floor:8.3f} s")
        print(f"layerprobe one pass:         {ours:8.3f} s   ratio to floor: {ours / floor:.3f}  (target <= 1.25)")
        if not args.skip_per_span:
            (spans,) = best_of(1, lambda: per_span(model, windows, args.batch_size, L))
            print(f"one pass per span (L={L}):   {spans:8.3f} s   per-span / layerprobe: {spans / ours:.2f}x")


if __name__ == "__main__":
    main()
