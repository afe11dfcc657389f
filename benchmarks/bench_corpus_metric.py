"""What does the shared-prefix engine save for `prune-drop --task corpus`?

Scores the corpus task (NLL, KL(base ‖ variant), top-1 agreement) for the baseline and every single
block removed, twice on the same loaded model and windows:
  simple   per batch, the base pass and one full pass per removed block;
  shared   per batch, one base pass that records every block's input x^l; "block l removed" runs only
           blocks l+1 … L-1 and the head from x^l.
The block rows run are (L+1)·L (simple: the base pass, then L−1 blocks per variant) against L(L+1)/2 + L
(shared), so the theoretical ratio of block work is (L+3)/(2(L+1))… (head work is the same for both:
two head passes per variant and position, base and variant, recomputed so no corpus × vocab is held).
Prints the minimum wall time over --repeats alternating rounds and the ratio shared/simple; also checks
the two engines agree. Asserts nothing else; no network (the model is bench_prune_drop's built LLaMA).

    python benchmarks/bench_corpus_metric.py                    # 8 layers, hidden 384, 4096 tokens
    python benchmarks/bench_corpus_metric.py --layers 12 --tokens 8192
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parent.parent)]
from bench_prune_drop import build_model  # noqa: E402

from layerprobe.core import BUILTIN_CORPUS, CorpusSpec, ModelSpec  # noqa: E402
from layerprobe.evaluate.corpus_metric import CorpusScorer, corpus_windows  # noqa: E402
from layerprobe.model import find_layers, load_model  # noqa: E402


def timed(engine: str, loaded, stack, corpus, windows, batch_size: int):
    layers = list(range(stack.num_layers))
    scorer = CorpusScorer(loaded, stack, corpus, layers, batch_size, engine, windows=windows)
    start = time.perf_counter()
    scorer.score()
    return time.perf_counter() - start, scorer.values


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, help="a local causal-LM checkpoint (default: build one)")
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=384)
    parser.add_argument("--vocab", type=int, default=4096)
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = args.model or build_model(Path(tmp) / "model", args.layers, args.hidden, args.vocab)
        loaded = load_model(ModelSpec(str(path), dtype="float32", device=args.device), purpose="head")
        stack = find_layers(loaded.model)
        corpus = CorpusSpec(BUILTIN_CORPUS, tokens=args.tokens, seq_len=args.seq_len)
        windows = corpus_windows(loaded, corpus)
        best = {"simple": float("inf"), "shared": float("inf")}
        values = {}
        for _ in range(args.repeats):
            for engine in ("simple", "shared"):
                seconds, values[engine] = timed(engine, loaded, stack, corpus, windows, args.batch_size)
                best[engine] = min(best[engine], seconds)
        diff = max(
            abs(a - b)
            for span in values["simple"]
            for key in values["simple"][span]
            for a, b in zip(values["simple"][span][key], values["shared"][span][key], strict=True)
        )
        L = stack.num_layers
        print(f"model: {path} ({L} blocks), {args.tokens} tokens, seq-len {args.seq_len}, device {args.device}")
        print(f"torch {torch.__version__}, threads {torch.get_num_threads()}")
        print(
            f"simple {best['simple']:.2f} s   shared {best['shared']:.2f} s   ratio shared/simple "
            f"{best['shared'] / best['simple']:.2f}"
        )
        print(f"block rows: simple {(L + 1) * L}, shared {L * (L + 1) // 2 + L}; max |simple − shared| {diff:.2e}")


if __name__ == "__main__":
    main()
