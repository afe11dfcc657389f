"""What does `layerprobe heal` win back, how fast, and what does the cut buy?

On one built random LLaMA (no network) and the builtin corpus, side by side in one run:
  1. `angular` over the calibration tokens (timed: the reference pass);
  2. the two adjacent blocks whose removal moves the residual least (min d(x^l, x^(l+2)), l >= 1);
  3. `heal --method linear`: the share of the held-out KL(original ‖ ·) gap it closes, with its
     paired-bootstrap interval, and the fit's wall time against the angular pass;
  4. `heal --method linear+lora` (--steps): the same share;
  5. `gain` of the linear-healed checkpoint (2 of --layers blocks removed) against the original;
  6. with --task-docs N (default 400): a teacher-labelled MMLU-shaped task (4 subjects of questions drawn
     from pydoc's words, gold = the unpruned model's own argmax choice, as in bench_sequential.py), scored
     by `heal --task` on the original, pruned and healed models: the task's recovery with its interval.
Prints one table; asserts nothing.

    python benchmarks/bench_heal.py                                  # 8 layers, hidden 256
    python benchmarks/bench_heal.py --layers 8 --hidden 128 --tokens 4096 --steps 50
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

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parent.parent)]
from bench_prune_drop import build_model  # noqa: E402
from bench_sequential import TASK, base_choices, write_task  # noqa: E402

from layerprobe.core import BUILTIN_CORPUS, AngularSpec, CorpusSpec, GainSpec, HealSpec, ModelSpec  # noqa: E402
from layerprobe.heal import run_gain, run_heal  # noqa: E402
from layerprobe.measure import run_angular  # noqa: E402
from layerprobe.model import load_model  # noqa: E402


def _share(result, task: str | None = None) -> str:
    rec = result.metrics["kl"]["recovery"] if task is None else result.tasks[task]["metrics"]["acc"]["recovery"]
    if rec["value"] is None:
        return "not defined"
    return f"{rec['value']:.1%} [{rec['ci95'][0]:.1%}, {rec['ci95'][1]:.1%}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--vocab", type=int, default=2048)
    parser.add_argument("--tokens", type=int, default=8192)
    parser.add_argument("--held-out-tokens", type=int, default=8192)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--task-docs", type=int, default=400, help="questions of the teacher-labelled task (0: none)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        source = build_model(Path(tmp) / "model", args.layers, args.hidden, args.vocab)
        model = ModelSpec(str(source), device=args.device)
        corpus = CorpusSpec(dataset=BUILTIN_CORPUS, tokens=args.tokens, seq_len=args.seq_len)
        clock = time.perf_counter()
        angular = run_angular(AngularSpec(model=model, corpus=corpus))
        angular_seconds = time.perf_counter() - clock
        distance = angular.distance
        start = min(range(1, args.layers - 1), key=lambda l: distance[l][l + 2])
        remove = f"{start}-{start + 1}"
        common = dict(model=model, corpus=corpus, remove=remove, held_out_tokens=args.held_out_tokens)
        if args.task_docs:  # gold = the unpruned model's own choice: the original scores 100 %
            teacher = load_model(
                ModelSpec(str(source), device=args.device, dtype="float32"), purpose="head", lm_eval=True
            )
            write_task(Path(tmp) / "draft", args.task_docs, None)
            write_task(Path(tmp) / "tasks", args.task_docs, base_choices(teacher, Path(tmp) / "draft", 0, 1234, 64))
            del teacher
            common |= dict(tasks=(TASK,), include_path=str(Path(tmp) / "tasks"), num_fewshot=0)
        linear = run_heal(HealSpec(**common, save=str(Path(tmp) / "linear")))
        both = run_heal(HealSpec(**common, method="linear+lora", steps=args.steps, lr=args.lr))
        gain = run_gain(
            [model, ModelSpec(str(Path(tmp) / "linear"), device=args.device)], GainSpec(repeats=args.repeats)
        )
    ratios = gain["models"][1]["ratios"]
    rows = [
        ("model", f"random LLaMA, {args.layers} blocks, hidden {args.hidden}, {args.device}"),
        ("removed (most redundant pair)", remove),
        ("calibration / held-out tokens", f"{args.tokens} / {args.held_out_tokens}"),
        ("angular pass (s)", f"{angular_seconds:.2f}"),
        ("linear fit (s) / ratio to angular", f"{linear.fit_seconds:.2f} / {linear.fit_seconds / angular_seconds:.2f}"),
        ("KL gap closed, linear", _share(linear)),
        (f"KL gap closed, linear+lora ({args.steps} steps)", _share(both)),
        ("held-out KL original‖pruned", f"{linear.metrics['kl']['pruned']['value']:.4f}"),
        *(
            [
                (f"{TASK} acc original / pruned / linear / +lora", " / ".join(
                    f"{r.tasks[TASK]['metrics']['acc'][k]['value']:.3f}"
                    for r, k in ((linear, "original"), (linear, "pruned"), (linear, "healed"), (both, "healed")))),
                (f"{TASK} recovery, linear", _share(linear, TASK)),
                (f"{TASK} recovery, linear+lora", _share(both, TASK)),
            ]
            if args.task_docs
            else []
        ),
        ("held-out KL original‖linear / +lora", f"{linear.metrics['kl']['healed']['value']:.4f} / "
         f"{both.metrics['kl']['healed']['value']:.4f}"),
        ("gain: parameters / bytes", f"{ratios['parameters']:.3f} / {ratios['bytes_on_disk']:.3f}"),
        ("gain: prefill / decode tok/s (median [25-75 %])", " / ".join(
            f"{ratios[k]['median']:.2f} [{ratios[k]['spread'][0]:.2f}, {ratios[k]['spread'][1]:.2f}]"
            for k in ("prefill_tokens_per_second", "decode_tokens_per_second"))),
    ]  # fmt: skip
    width = max(len(r[0]) for r in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")


if __name__ == "__main__":
    main()
