"""Run every README command on offline fixtures under two versions of layerprobe and compare what they write.

A restructuring must not change a single number. This script builds the fixtures once (a tiny random
8-block LLaMA, a tiny BERT for SQuAD, the real MiniLM, a local corpus and SQuAD file), then runs the same
command list under each version — a git ref checked out into a temporary worktree, or the working tree
itself — writing into the same absolute output path, so that paths recorded inside results are equal too.
It then compares every JSON and JSON-lines file (timings and run dates aside), every other file by its
bytes (plots excepted: their PNG/PDF metadata carry dates), each command's exit status, and its stdout
with timings masked.

    python benchmarks/behaviour_check.py --before 0d40b51            # that commit against the working tree
    python benchmarks/behaviour_check.py --before HEAD --after HEAD  # the noise floor: must be identical

Exit status 0 when every compared output is identical, 1 otherwise (each difference is printed).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

# Values that differ between two runs of the same code: when it ran and how fast.
VOLATILE_KEYS = {"started_at", "created", "seconds", "tokens_per_second", "duration_seconds", "elapsed"}
# Files compared by existence only: matplotlib stamps dates into PNG/PDF metadata.
BYTES_UNCOMPARED = {".png", ".pdf"}
TIMING = [
    (re.compile(r"\d[\d,.]*\s*(s|tokens/s|eval/s|it/s)\b"), "<time>"),
    (re.compile(r"\d+:\d\d:\d\d"), "<clock>"),
]


def commands(fx: dict[str, str], out: str) -> list[tuple[str, list[str]]]:
    """(name, argv after `python -m layerprobe`) for every README command, on fixtures."""
    llama, tasks = fx["llama"], fx["tasks"]
    pydoc = ["--dataset", "builtin:pydoc"]
    return [
        ("help", ["--help"]),
        *[
            (f"help-{c}", [c, "--help"])
            for c in (
                "angular",
                "prune-drop",
                "prune-curve",
                "prune",
                "depth",
                "compare",
                "merge",
                "plot",
                "layers",
                "demo",
            )
        ],
        ("angular", ["angular", llama, *pydoc, "--tokens", "8192", "--seq-len", "128", "--out", f"{out}/pd", "-q"]),
        (
            "angular-jsonl-last",
            [
                "angular",
                llama,
                "--dataset",
                fx["corpus"],
                "--text-field",
                "body",
                "--positions",
                "last",
                "--tokens",
                "2048",
                "--seq-len",
                "64",
                "--out",
                f"{out}/jsonl",
                "-q",
            ],
        ),
        ("layers", ["layers", llama]),
        ("layers-minilm", ["layers", fx["minilm"]]),
        (
            "depth-grad",
            ["depth", llama, *pydoc, "--tokens", "2048", "--seq-len", "128", "--grad", "--out", f"{out}/depth", "-q"],
        ),
        (
            "depth-minilm",
            ["depth", fx["minilm"], *pydoc, "--tokens", "4096", "--seq-len", "256", "--out", f"{out}/dmini", "-q"],
        ),
        (
            "prune-drop",
            [
                "prune-drop",
                llama,
                "--task",
                "lp_pydoc_ppl",
                "--task",
                "lp_arc_like",
                "--include-path",
                tasks,
                "--out",
                f"{out}/pd",
                "--log-samples",
                "-q",
            ],
        ),
        (
            "prune-drop-spellings",
            [
                "prune-drop",
                llama,
                "--tasks",
                "lp_arc_like,lp_mmlu",
                "--num_fewshot",
                "2",
                "--batch_size",
                "4",
                "--include_path",
                tasks,
                "--layers",
                "2-5",
                "--limit",
                "6",
                "--output_path",
                f"{out}/spell",
                "-q",
            ],
        ),
        (
            "prune-drop-attention",
            ["prune-drop", llama, "--task", "lp_arc_like", "--include-path", tasks, "--unit", "attention"]
            + ["--limit", "8", "--out", f"{out}/attn", "-q"],
        ),
        (
            "prune-drop-span",
            ["prune-drop", llama, "--task", "lp_arc_like", "--include-path", tasks, "--span", "3"]
            + ["--limit", "8", "--out", f"{out}/span", "-q"],
        ),
        (
            "prune-drop-simple",
            ["prune-drop", llama, "--task", "lp_mmlu", "--include-path", tasks, "--engine", "simple"]
            + ["--num-fewshot", "1", "--layers", "0,7", "--limit", "5", "--out", f"{out}/simple", "-q"],
        ),
        (
            "prune-drop-corpus",
            ["prune-drop", llama, "--task", "corpus", *pydoc, "--tokens", "2048", "--seq-len", "128"]
            + ["--out", f"{out}/corpus", "-q"],
        ),
        (
            "prune-drop-squad",
            [
                "prune-drop",
                fx["bert_qa"],
                "--task",
                "squad",
                "--squad-data",
                fx["squad"],
                "--out",
                f"{out}/squad",
                "-q",
            ],
        ),
        *[
            (
                f"prune-drop-shard-{i}",
                ["prune-drop", llama, "--task", "lp_arc_like", "--include-path", tasks, "--limit", "6"]
                + ["--shard", f"{i}/2", "--out", f"{out}/shard-{i}", "-q"],
            )
            for i in (0, 1)
        ],
        ("merge", ["merge", f"{out}/shard-0", f"{out}/shard-1", "--out", f"{out}/merged"]),
        (
            "prune-curve",
            ["prune-curve", llama, "--task", "corpus", "--angular", f"{out}/pd/angular.json", "--baseline-seeds", "2"]
            + [*pydoc, "--tokens", "2048", "--seq-len", "128", "--out", f"{out}/curve", "-q"],
        ),
        (
            "prune-export",
            [
                "prune",
                llama,
                "--remove",
                "2-3",
                "--save",
                f"{out}/pruned",
                "--mergekit-yaml",
                f"{out}/pruned.yaml",
                "-q",
            ],
        ),
        ("compare-json", ["compare", f"{out}/pd/angular.json", f"{out}/jsonl/angular.json", "--format", "json"]),
        (
            "compare-markdown",
            ["compare", f"{out}/pd/angular.json", f"{out}/jsonl/angular.json", "--format", "markdown"]
            + ["--junit", f"{out}/junit.xml", "--adjacent-tolerance", "0.5", "--no-plot"],
        ),
        ("compare-dirs", ["compare", f"{out}/spell", f"{out}/merged", "--format", "json", "--out", f"{out}/cmpfig"]),
        ("compare-depth", ["compare", f"{out}/depth/depth.json", f"{out}/depth/depth.json", "--format", "json"]),
        ("plot", ["plot", f"{out}/pd/prune_drop.json", "--out", f"{out}/replot"]),
        ("plot-depth", ["plot", f"{out}/depth/depth.json", "--out", f"{out}/replot-depth"]),
        ("demo", ["demo", "--tokens", "4096", "--out", f"{out}/demo", "-q"]),
    ]


def build_fixtures(root: Path) -> dict[str, str]:
    """Every input the commands read, built once and shared by both versions."""
    from factories import build_checkpoint, minilm_dir, pydoc_texts

    root.mkdir(parents=True, exist_ok=True)
    llama = build_checkpoint("llama", root / "tiny-llama-8", num_layers=8)
    bert_qa = build_checkpoint("bert_qa", root / "tiny-bert-qa", num_layers=4)
    corpus = root / "corpus.jsonl"
    with corpus.open("w", encoding="utf-8") as handle:
        for text in pydoc_texts()[:60]:
            handle.write(json.dumps({"body": text}) + "\n")
    paragraphs = []
    for k, text in enumerate(pydoc_texts()[:6]):
        context = " ".join(text.split())[:400]
        words = context.split()
        answer = words[3]
        paragraphs.append(
            {
                "context": context,
                "qas": [
                    {
                        "id": f"q{k}",
                        "question": f"What is the fourth word of topic {k}?",
                        "answers": [{"text": answer, "answer_start": context.index(answer)}],
                    }
                ],
            }
        )
    squad = root / "squad.json"
    squad.write_text(json.dumps({"version": "1.1", "data": [{"title": "pydoc", "paragraphs": paragraphs}]}))
    return {
        "llama": str(llama),
        "bert_qa": str(bert_qa),
        "minilm": str(minilm_dir()),
        "corpus": str(corpus),
        "squad": str(squad),
        "tasks": str(ROOT / "tests" / "data" / "tasks"),
    }


def run_version(tree: Path, fx: dict[str, str], out: Path, log: Path) -> dict[str, dict]:
    """Run every command with `tree` first on the path; return name → {rc, stdout}."""
    env = dict(os.environ)
    env.update(
        PYTHONPATH=str(tree),
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
        MPLBACKEND="Agg",
        COLUMNS="160",
    )
    env["HF_DATASETS_CACHE"] = tempfile.mkdtemp(prefix="lp-behaviour-datasets-")
    where = subprocess.run(
        [sys.executable, "-c", "import layerprobe; print(layerprobe.__file__)"],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
    ).stdout.strip()
    if not where.startswith(str(tree)):
        raise SystemExit(f"layerprobe imports from {where}, not from {tree}")
    records = {}
    for name, argv in commands(fx, str(out)):
        started = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "layerprobe", *argv], cwd=tree, env=env, capture_output=True, text=True
        )
        records[name] = {"rc": proc.returncode, "stdout": proc.stdout}
        with log.open("a", encoding="utf-8") as handle:
            handle.write(f"$ layerprobe {' '.join(argv)}\n[rc {proc.returncode}]\n{proc.stdout}\n{proc.stderr}\n")
        print(f"  {name}: exit {proc.returncode} ({time.perf_counter() - started:.1f} s)", flush=True)
    return records


def scrub(value):
    """A JSON value with its volatile members removed and floats compared exactly (NaN equal to NaN)."""
    if isinstance(value, dict):
        return {k: scrub(v) for k, v in value.items() if k not in VOLATILE_KEYS}
    if isinstance(value, list):
        return [scrub(v) for v in value]
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    return value


def first_difference(a, b, path: str = "$") -> str | None:
    if type(a) is not type(b):
        return f"{path}: {a!r} vs {b!r}"
    if isinstance(a, dict):
        for key in sorted(set(a) | set(b)):
            if key not in a or key not in b:
                return f"{path}.{key}: only in {'after' if key not in a else 'before'}"
            found = first_difference(a[key], b[key], f"{path}.{key}")
            if found:
                return found
        return None
    if isinstance(a, list):
        if len(a) != len(b):
            return f"{path}: length {len(a)} vs {len(b)}"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            found = first_difference(x, y, f"{path}[{i}]")
            if found:
                return found
        return None
    return None if a == b else f"{path}: {a!r} vs {b!r}"


def load_any(path: Path):
    if path.suffix == ".jsonl":
        return [scrub(json.loads(line)) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return scrub(json.loads(path.read_text(encoding="utf-8")))


def mask(text: str) -> str:
    for pattern, replacement in TIMING:
        text = pattern.sub(replacement, text)
    return text


def compare(before: Path, after: Path, runs: dict[str, dict[str, dict]]) -> list[str]:
    problems = []
    files_before = {p.relative_to(before) for p in before.rglob("*") if p.is_file()}
    files_after = {p.relative_to(after) for p in after.rglob("*") if p.is_file()}
    for rel in sorted(files_before ^ files_after, key=str):
        problems.append(f"file only {'before' if rel in files_before else 'after'}: {rel}")
    compared = 0
    for rel in sorted(files_before & files_after, key=str):
        a, b = before / rel, after / rel
        if rel.suffix in BYTES_UNCOMPARED:
            continue
        compared += 1
        if rel.suffix in (".json", ".jsonl"):
            found = first_difference(load_any(a), load_any(b))
            if found:
                problems.append(f"{rel}: {found}")
        elif a.read_bytes() != b.read_bytes():
            problems.append(f"{rel}: bytes differ")
    for name in runs["before"]:
        x, y = runs["before"][name], runs["after"].get(name)
        if y is None:
            problems.append(f"{name}: not run after")
            continue
        if x["rc"] != y["rc"]:
            problems.append(f"{name}: exit {x['rc']} before, {y['rc']} after")
        if mask(x["stdout"]) != mask(y["stdout"]):
            old, new = mask(x["stdout"]).splitlines(), mask(y["stdout"]).splitlines()
            line = next((i for i, (p, q) in enumerate(zip(old, new, strict=False)) if p != q), min(len(old), len(new)))
            problems.append(
                f"{name}: stdout differs at line {line + 1}: "
                f"{(old[line] if line < len(old) else '<end>')!r} → {(new[line] if line < len(new) else '<end>')!r}"
            )
    print(f"compared {compared} files and {len(runs['before'])} commands' exit status and stdout")
    return problems


def checkout(ref: str | None, into: Path) -> Path:
    """The tree to run: the working tree for None, else `ref` in a detached temporary worktree."""
    if ref is None:
        return ROOT
    subprocess.run(["git", "worktree", "add", "--detach", str(into), ref], cwd=ROOT, check=True, capture_output=True)
    return into


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", required=True, help="git ref of the earlier version")
    parser.add_argument("--after", default=None, help="git ref of the later version (default: the working tree)")
    parser.add_argument("--work", type=Path, default=None, help="working directory (default: a temporary one)")
    parser.add_argument("--keep", action="store_true", help="keep the working directory")
    args = parser.parse_args()
    work = (args.work or Path(tempfile.mkdtemp(prefix="lp-behaviour-"))).resolve()
    work.mkdir(parents=True, exist_ok=True)
    print(f"fixtures in {work / 'fixtures'}", flush=True)
    fx = build_fixtures(work / "fixtures")
    runs, trees = {}, []
    try:
        for side, ref in (("before", args.before), ("after", args.after)):
            tree = checkout(ref, work / f"tree-{side}")
            if tree != ROOT:
                trees.append(tree)
            print(f"{side}: {ref or 'working tree'} ({tree})", flush=True)
            out = work / "out"
            runs[side] = run_version(tree, fx, out, work / f"{side}.log")
            out.rename(work / side)
        problems = compare(work / "before", work / "after", runs)
    finally:
        for tree in trees:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, capture_output=True)
        if not args.keep and args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    for problem in problems:
        print("DIFFERENT", problem)
    print("identical" if not problems else f"{len(problems)} difference(s)")
    return 0 if not problems else 1


if __name__ == "__main__":
    raise SystemExit(main())
