"""What does `prune-drop --precision 0.05` save over a full prune-drop, and do its intervals hold?

Builds an MMLU-shaped local lm-eval group (4 subjects, --docs questions in all, 4 choices, acc) whose
gold answers are the base model's own argmax choices, so the baseline scores 100 % and every removed
block costs exactly the answers it changes. The model is a LLaMA-shaped random checkpoint (built here,
no network) in which every second block is made nearly lazy (its attention and MLP output projections
scaled by --lazy-scale) and the others strong (× --strong-scale), so ΔP spreads from ≈ 0 to large
losses, as in real models.

Then, in one process on one loaded model, prune-drop runs twice with the same settings: sequentially
(`--precision`, first) and in full. It prints and writes (`--out`) a table:
  documents scored, baseline included: sequential / full      (target ≤ 0.25)
  wall time: sequential / full                                 (target ≤ 0.5)
  full-run ΔP inside the sequential anytime 95 % interval      (target ≥ L − 1 of L)
and a projection for full MMLU 5-shot (14,042 questions) on a 7B model (32 blocks), from the same
confidence sequence on simulated paired outcomes under the assumptions printed with it.

    python benchmarks/bench_sequential.py                        # 4 blocks, hidden 64, 1,600 questions
    python benchmarks/bench_sequential.py --docs 400 --layers 4 --hidden 64     # a quick smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import random
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers as tf  # noqa: E402
from bench_prune_drop import build_model  # noqa: E402

from layerprobe.core import ModelSpec, PruneSpec  # noqa: E402
from layerprobe.evaluate.documents import build_population  # noqa: E402
from layerprobe.evaluate.harness import make_lm  # noqa: E402
from layerprobe.evaluate.tasks import build_tasks  # noqa: E402
from layerprobe.model import load_model  # noqa: E402
from layerprobe.prune import run_prune_drop  # noqa: E402
from layerprobe.stats import ConfidenceSequence  # noqa: E402

TASK = "bench_mmlu"
SUBJECTS = ("stem", "humanities", "social", "other")
TEMPLATE = """dataset_path: json
test_split: test
fewshot_split: dev
fewshot_config:
  sampler: first_n
output_type: multiple_choice
doc_to_text: "{{question.strip()}}\\nA. {{choices[0]}}\\nB. {{choices[1]}}\\nC. {{choices[2]}}\\nD. \\
  {{choices[3]}}\\nAnswer:"
doc_to_choice: ["A", "B", "C", "D"]
doc_to_target: answer
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
metadata:
  version: 1.0
"""


def write_task(folder: Path, docs: int, answers: dict[tuple[str, int], int] | None, seed: int = 0) -> None:
    """The group and its subjects: questions and choices drawn from pydoc's words; gold `answers` (else 0)."""
    from pydoc_data.topics import topics

    words = [w for text in topics.values() for w in text.split() if w.isalpha() and len(w) > 2]
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "_bench_template_yaml").write_text(TEMPLATE)
    per_subject = docs // len(SUBJECTS)
    for subject in SUBJECTS:
        name = f"{TASK}_{subject}"
        for split, count in (("test", per_subject), ("dev", 5)):
            rows = []
            for i in range(count):
                question = " ".join(rng.choice(words) for _ in range(rng.randint(4, 8))) + "?"
                choices = [rng.choice(words) for _ in range(4)]
                gold = (answers or {}).get((name, i), 0) if split == "test" else rng.randrange(4)
                rows.append(json.dumps({"question": question, "choices": choices, "answer": gold}))
            (folder / f"{name}_{split}.jsonl").write_text("\n".join(rows) + "\n")
        (folder / f"{name}.yaml").write_text(
            f"include: _bench_template_yaml\ntask: {name}\ndataset_kwargs:\n  data_files:\n"
            f"    test: {name}_test.jsonl\n    dev: {name}_dev.jsonl\n"
        )
    subjects = "\n".join(f"  - {TASK}_{s}" for s in SUBJECTS)
    (folder / f"{TASK}.yaml").write_text(
        f"group: {TASK}\ntask:\n{subjects}\naggregate_metric_list:\n  - metric: acc\n    weight_by_size: true\n"
        "metadata:\n  version: 1\n"
    )


def base_choices(loaded, folder: Path, fewshot: int, seed: int, batch: int) -> dict[tuple[str, int], int]:
    """The base model's argmax choice of every question (what a full run's baseline would answer)."""
    task_set = build_tasks([TASK], str(folder), fewshot, seed)
    population = build_population(task_set, TASK, None, seed)
    lm = make_lm(loaded.model, loaded.tokenizer, batch)
    instances = [i for doc in population.documents for i in population.requests[doc]]
    answers = lm.loglikelihood(instances)
    by_doc: dict[tuple[str, int], list[float]] = {}
    for instance, (loglikelihood, _) in zip(instances, answers, strict=True):
        by_doc.setdefault((instance.task_name, instance.doc_id), []).append(loglikelihood)
    return {doc: int(np.argmax(values)) for doc, values in by_doc.items()}


def spread_blocks(path: Path, lazy: float, strong: float) -> None:
    """Scale the output projections of blocks 1, 3, … by `lazy` (removal changes little) and 0, 2, … by `strong`."""
    model = tf.AutoModelForCausalLM.from_pretrained(path)
    with torch.no_grad():
        for index, block in enumerate(model.model.layers):
            scale = lazy if index % 2 == 1 else strong
            block.self_attn.o_proj.weight.mul_(scale)
            block.mlp.down_proj.weight.mul_(scale)
    model.save_pretrained(path)


def documents_scored(result) -> tuple[int, int]:
    """(documents scored, baseline included; documents per variant of a full run), summed over tasks."""
    scored = full = 0
    for task in result.tasks.values():
        metric = next(iter(task.metrics.values()))
        items = metric.items or [task.samples] * len(metric.layers)
        scored += (task.samples or 0) + sum(items)
        full += task.samples or 0
    return scored, full


def documents_needed(
    flips: tuple[float, float], population: int, precision: float, round_size: int, runs: int, seed: int
) -> float:
    """Mean documents a variant needs when a removal loses (gains) a question with these probabilities."""
    rng = np.random.default_rng(seed)
    used = []
    for _ in range(runs):
        u = rng.random(population)
        diffs = np.where(u < flips[0], -1.0, np.where(u < flips[0] + flips[1], 1.0, 0.0))
        sequence = ConfidenceSequence(population=population)
        for start in range(0, population, round_size):
            sequence.update(diffs[start : start + round_size])
            if sequence.stop(precision):
                break
        used.append(sequence.seen)
    return float(np.mean(used))


def projection(precision: float, round_size: int, gpu_hours_per_pass: float, runs: int) -> list[str]:
    """Full MMLU 5-shot on a 7B (32 blocks): documents per variant and GPU hours, under stated assumptions."""
    population, blocks = 14042, 32
    # Assumed effects of removing one block of a 7B (Llama-2-7B-like): 2 critical blocks (first, last) that
    # flip half the answers; 6 that cost a few points; 24 nearly lazy ones. Loss/gain probabilities per question.
    profile = [(2, (0.50, 0.05)), (6, (0.08, 0.03)), (24, (0.025, 0.015))]
    lines = [
        f"Projection: MMLU 5-shot, N = {population:,} questions, a 7B with L = {blocks} blocks, "
        f"--precision {precision}, --round-size {round_size}.",
        "Assumed per-question loss/gain probabilities when a block is removed: "
        + "; ".join(f"{n} blocks {lose:.1%}/{gain:.1%}" for n, (lose, gain) in profile),
        f"Assumed cost of one full 5-shot MMLU evaluation of a 7B: {gpu_hours_per_pass} GPU-hours (simple engine; "
        "the shared engine scales both runs alike).",
        "",
        "| blocks | loss/gain per question | documents per variant (mean) |",
        "|---|---|---|",
    ]
    needed = []
    for count, flips in profile:
        docs = documents_needed(flips, population, precision, round_size, runs, seed=count)
        needed += [docs] * count
        lines.append(f"| {count} | {flips[0]:.1%} / {flips[1]:.1%} | {docs:,.0f} |")
    scored = max(needed) + sum(needed)
    full = (blocks + 1) * population
    saved = (1 - scored / full) * (blocks + 1) * gpu_hours_per_pass
    lines += [
        "",
        f"Documents scored, baseline included: {scored:,.0f} of {full:,} ({scored / full:.3f}×); "
        f"GPU hours {scored / full * (blocks + 1) * gpu_hours_per_pass:.1f} instead of "
        f"{(blocks + 1) * gpu_hours_per_pass:.1f} (saved {saved:.1f}).",
    ]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, default=1600, help="questions in the task (4 subjects)")
    parser.add_argument("--layers", type=int, default=4, help="blocks of the built model")
    parser.add_argument("--hidden", type=int, default=64, help="hidden size of the built model")
    parser.add_argument("--vocab", type=int, default=2048, help="BPE vocabulary of the built model")
    parser.add_argument("--lazy-scale", type=float, default=0.05, help="output scale of blocks 1, 3, …")
    parser.add_argument("--strong-scale", type=float, default=4.0, help="output scale of blocks 0, 2, …")
    parser.add_argument("--num-fewshot", type=int, default=0, help="few-shot examples per question")
    parser.add_argument("--precision", type=float, default=0.05)
    parser.add_argument("--round-size", type=int, default=50)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--gpu-hours-per-pass", type=float, default=0.5, help="projection: one full MMLU pass")
    parser.add_argument("--projection-runs", type=int, default=20, help="simulated runs per block profile")
    parser.add_argument("--out", type=Path, help="write sequential.json and sequential.md here")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        model_dir = build_model(root / "model", args.layers, args.hidden, args.vocab)
        spread_blocks(model_dir, args.lazy_scale, args.strong_scale)
        spec_model = ModelSpec(str(model_dir), device=args.device, dtype="float32")
        loaded = load_model(spec_model, purpose="head", lm_eval=True)
        write_task(root / "tasks_draft", args.docs, None)
        answers = base_choices(loaded, root / "tasks_draft", args.num_fewshot, args.seed, args.batch_size)
        write_task(root / "tasks", args.docs, answers)
        settings = dict(
            model=spec_model,
            tasks=(TASK,),
            num_fewshot=args.num_fewshot,
            batch_size=args.batch_size,
            seed=args.seed,
            include_path=str(root / "tasks"),
        )
        start = time.perf_counter()
        sequential = run_prune_drop(
            PruneSpec(**settings, precision=args.precision, round_size=args.round_size), root / "seq", loaded=loaded
        )
        seq_seconds = time.perf_counter() - start
        start = time.perf_counter()
        full = run_prune_drop(PruneSpec(**settings), root / "full", loaded=loaded)
        full_seconds = time.perf_counter() - start
    assert sequential is not None and full is not None
    seq_metric, full_metric = sequential.tasks[TASK].metrics["acc"], full.tasks[TASK].metrics["acc"]
    assert seq_metric.delta_cs95 is not None and seq_metric.items is not None and seq_metric.stop is not None
    inside = [
        cs is not None and cs[0] - 1e-12 <= d <= cs[1] + 1e-12
        for d, cs in zip(full_metric.delta, seq_metric.delta_cs95, strict=True)
    ]
    seq_docs, _ = documents_scored(sequential)
    full_docs = (len(full_metric.layers) + 1) * (full.tasks[TASK].samples or 0)
    blocks = len(full_metric.layers)
    lines = [
        f"Model: LLaMA-shaped random, {args.layers} blocks, hidden {args.hidden} (blocks 1, 3, … outputs × "
        f"{args.lazy_scale}, blocks 0, 2, … × {args.strong_scale}), {args.device}; task: {TASK}, "
        f"{full.tasks[TASK].samples} questions, 4 choices, "
        f"{args.num_fewshot}-shot, gold = the base model's choice (baseline {full_metric.baseline:.3f}); "
        f"engine {full.engine}; --precision {args.precision} --round-size {args.round_size}.",
        "",
        "| block | full ΔP | sequential ΔP | anytime 95 % interval | documents | stop | full ΔP inside |",
        "|---|---|---|---|---|---|---|",
    ]
    for i, layer in enumerate(full_metric.layers):
        cs = seq_metric.delta_cs95[i] or [float("nan")] * 2
        lines.append(
            f"| {layer} | {full_metric.delta[i]:+.4f} | {seq_metric.delta[i]:+.4f} | [{cs[0]:+.3f}, {cs[1]:+.3f}] | "
            f"{seq_metric.items[i]} | {seq_metric.stop[i]} | {'yes' if inside[i] else 'NO'} |"
        )
    lines += [
        "",
        "| measure | sequential | full | ratio | target |",
        "|---|---|---|---|---|",
        f"| documents scored (baseline included) | {seq_docs:,} | {full_docs:,} | {seq_docs / full_docs:.3f} "
        "| ≤ 0.25 |",
        f"| wall time (s) | {seq_seconds:.1f} | {full_seconds:.1f} | {seq_seconds / full_seconds:.3f} | ≤ 0.5 |",
        f"| full-run ΔP inside the interval | {sum(inside)} of {blocks} | | | ≥ {blocks - 1} of {blocks} |",
        "",
        *projection(args.precision, args.round_size, args.gpu_hours_per_pass, args.projection_runs),
    ]
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "sequential.md").write_text(text + "\n")
        record = {
            "documents_ratio": seq_docs / full_docs,
            "wall_ratio": seq_seconds / full_seconds,
            "inside": sum(inside),
            "blocks": blocks,
            "sequential_seconds": seq_seconds,
            "full_seconds": full_seconds,
            "items": seq_metric.items,
            "stop": seq_metric.stop,
            "full_delta": full_metric.delta,
            "delta_cs95": seq_metric.delta_cs95,
        }
        (args.out / "sequential.json").write_text(json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    main()
