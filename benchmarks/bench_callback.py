"""What does watching a training run cost? The monitor's overhead, and the API against the CLI's measurement.

1. Training overhead: the same training loop (AdamW, next-token loss, seeded) is timed without and with the
   monitor that `LayerprobeCallback` runs (gradient norms read at the measured steps, `Monitor.step` every
   `--every` steps). The measured ratio is printed, and, since one measurement costs the same whenever it
   runs, the overhead at other settings is extrapolated from its two parts: 1 + t_measure(tokens) /
   (every × t_step). `t_measure` is timed for each `--scan-tokens` value.
2. API vs CLI: `lp.angular` on the live model against `run_angular` on the saved checkpoint (what
   `layerprobe angular` calls), on the same windows: the ratio of their measuring passes' tokens/s (≈ 1×)
   and of the whole calls' CPU times (the CLI's includes loading the checkpoint).

Times are this process's CPU seconds (`time.process_time`, all threads), not wall time: on a machine shared
with other jobs a wall clock measures the wait for a core as much as the work.

No network: a LLaMA-shaped random model is built here (MiniLM's tokenizer from the demo extra), the text is
the stdlib's pydoc topics.

    python benchmarks/bench_callback.py                       # defaults: 4 layers, hidden 256, 40 steps
    python benchmarks/bench_callback.py --layers 8 --hidden 512 --steps 100 --every 50
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch
import transformers as tf

import layerprobe as lp
from layerprobe.core import BUILTIN_CORPUS, AngularSpec, CorpusSpec, ModelSpec
from layerprobe.measure import run_angular
from layerprobe.model import demo_model_dir


def clock() -> float:
    """This process's CPU seconds (all its threads): on a shared machine, the work done, not the wait for a core."""
    return time.process_time()


def build(directory: Path, layers: int, hidden: int) -> tuple[tf.PreTrainedModel, tf.PreTrainedTokenizerBase]:
    tokenizer = tf.AutoTokenizer.from_pretrained(demo_model_dir())
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
    model = tf.LlamaForCausalLM(config)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return model, tokenizer


def train(model, steps: int, batch: int, seq: int, monitor=None, every: int = 0) -> tuple[float, float, list[float]]:
    """(CPU seconds, of which in the monitor, losses) of `steps` optimizer steps on seeded random tokens."""
    torch.manual_seed(1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    vocab = model.config.vocab_size
    data = [torch.randint(0, vocab, (batch, seq)) for _ in range(steps)]
    model.train()
    watching = 0.0
    losses = []
    start = clock()
    for step, ids in enumerate(data, 1):
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        losses.append(float(loss.detach()))
        due = monitor is not None and step % every == 0
        mark = clock()
        if due:
            monitor.record_gradients()
        watching += clock() - mark
        optimizer.step()
        optimizer.zero_grad()
        mark = clock()
        if due:
            monitor.step(step)
        watching += clock() - mark
    return clock() - start, watching, losses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--every", type=int, default=20)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--tokens", type=int, default=4096, help="calibration positions of the measured run")
    parser.add_argument("--scan-tokens", default="4096,32768", help="calibration sizes timed for the table")
    parser.add_argument("--scan-every", default="100,500,1000", help="intervals the table extrapolates to")
    parser.add_argument("--api-tokens", type=int, default=4096, help="calibration positions of the API-vs-CLI run")
    parser.add_argument("--api-rounds", type=int, default=5, help="interleaved rounds of the API-vs-CLI comparison")
    args = parser.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))

    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "model"
        model, tokenizer = build(path, args.layers, args.hidden)
        initial = {k: v.clone() for k, v in model.state_dict().items()}
        plain, _, plain_losses = train(model, args.steps, args.batch, args.seq)
        model.load_state_dict(initial)
        monitor = lp.Monitor(model, tokenizer, BUILTIN_CORPUS, tokens=args.tokens, seq_len=args.seq, depth=True)
        watched, watching, losses = train(model, args.steps, args.batch, args.seq, monitor, args.every)
        step_time = plain / args.steps
        measurements = args.steps // args.every
        print(f"model: LLaMA {args.layers} layers, hidden {args.hidden}; batch {args.batch}×{args.seq} tokens")
        print(f"training {args.steps} steps: {plain:.2f} CPU s without, {watched:.2f} with the monitor every ")
        print(f"  {args.every} steps ({args.tokens} calibration tokens): overhead ratio {watched / plain:.3f}")
        print(
            f"  of which {watching:.2f} s inside the monitor ({measurements} measurements): "
            f"ratio from the parts {1 + watching / plain:.3f}; losses unchanged: {losses == plain_losses}"
        )
        print(f"one training step: {step_time * 1000:.0f} ms")
        scan = [int(t) for t in args.scan_tokens.split(",")]
        intervals = [int(e) for e in args.scan_every.split(",")]
        print("extrapolated overhead ratio 1 + t_measure / (every × t_step):")
        print("  tokens   t_measure  " + "  ".join(f"every={e:<5}" for e in intervals))
        for tokens in scan:
            timer = lp.Monitor(model, tokenizer, BUILTIN_CORPUS, tokens=tokens, seq_len=args.seq, depth=True)
            start = clock()
            timer.step(0)
            measure = clock() - start
            ratios = "  ".join(f"{1 + measure / (e * step_time):<11.4f}" for e in intervals)
            print(f"  {tokens:<8} {measure:7.2f} s  {ratios}")

        model.load_state_dict(initial)  # the weights saved at `path`: the CLI measures those
        model.eval()
        corpus = CorpusSpec(BUILTIN_CORPUS, tokens=args.api_tokens, seq_len=args.seq)
        # Interleaved rounds (API then CLI, then CLI then API, …) so that warm-up and the machine's other
        # work fall on both alike; the ratio reported is the median of the rounds' ratios.
        ratios, calls, gap = [], [], 0.0
        for round_ in range(args.api_rounds):
            timed = {}
            for which in ("api", "cli") if round_ % 2 == 0 else ("cli", "api"):
                start = clock()
                if which == "api":
                    result = lp.angular(model, tokenizer, BUILTIN_CORPUS, tokens=args.api_tokens, seq_len=args.seq)
                else:
                    result = run_angular(AngularSpec(ModelSpec(str(path), device="cpu", dtype="float32"), corpus))
                timed[which] = (result, clock() - start)
            (api, api_call), (cli, cli_call) = timed["api"], timed["cli"]
            rows = zip(api.distance, cli.distance, strict=True)
            gap = max(gap, max(abs(a - b) for ra, rb in rows for a, b in zip(ra, rb, strict=True)))
            ratios.append(cli.tokens_per_second / api.tokens_per_second)
            calls.append((api_call, cli_call))
        ratio = statistics.median(ratios)
        print(
            f"API vs CLI on {args.api_tokens} tokens, {args.api_rounds} interleaved rounds: measuring-pass time ratio "
            f"API/CLI median {ratio:.2f} (rounds {', '.join(f'{r:.2f}' for r in ratios)}); whole call median "
            f"{statistics.median(a for a, _ in calls):.2f} vs {statistics.median(c for _, c in calls):.2f} CPU s "
            f"(the CLI's loads the checkpoint); max |Δd| {gap:.1e}"
        )


if __name__ == "__main__":
    main()
