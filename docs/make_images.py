"""Make the README's figures of `depth`, `prune-drop` and `compare` from real runs of this checkout.

    python docs/make_images.py                        # all three figures below, into docs/img/
    python docs/make_images.py --only depth compare   # some of them
    python docs/make_images.py --work /tmp/lp         # keep the run directories there

- `depth-minilm.png`: `layerprobe depth` of the demo MiniLM-L6 on 16,384 tokens of `builtin:pydoc`.
- `compare-example.png`: `layerprobe compare` of a 4,096-token demo run against a 32,768-token one with
  `--adjacent-tolerance 0.001` (it fails on purpose: the figure shows what moved).
- `prune-drop-example.png`: `layerprobe prune-drop` of the tests' tiny random 8-block LLaMA on the
  perplexity fixture task (15 documents), with its angular result for the agreement overlay.

Offline and CPU-only (a few minutes in all). The numbers of the tiny model are of random weights.
The track and report pictures come from docs/make_review_images.py.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("MPLBACKEND", "Agg")

IMAGES = ROOT / "docs" / "img"
CPU = ["--device", "cpu", "--quiet"]


def layerprobe(*args: str, allowed: tuple[int, ...] = (0,)) -> None:
    """A layerprobe command of this checkout, as a user would run it (exit statuses in `allowed` pass)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "layerprobe", *args], env=env, check=False)
    if done.returncode not in allowed:
        raise SystemExit(f"layerprobe {' '.join(args)} exited with {done.returncode}")


def depth(work: Path) -> Path:
    """docs/img/depth-minilm.png from a depth run of the demo MiniLM."""
    from layerprobe.model import demo_model_dir

    out = work / "depth-minilm"
    corpus = ["--dataset", "builtin:pydoc", "--tokens", "16384", "--seq-len", "256"]
    layerprobe("depth", str(demo_model_dir()), *corpus, *CPU, "--out", str(out))
    return shutil.copyfile(out / "depth.png", IMAGES / "depth-minilm.png")


def compare(work: Path) -> Path:
    """docs/img/compare-example.png from two demo runs of different lengths, gated tightly."""
    base, cand = work / "compare" / "base", work / "compare" / "cand"
    layerprobe("demo", "--tokens", "32768", "--out", str(base), "--quiet")
    layerprobe("demo", "--tokens", "4096", "--out", str(cand), "--quiet")
    gate = ["--adjacent-tolerance", "0.001"]
    layerprobe("compare", str(base / "angular.json"), str(cand / "angular.json"), *gate, allowed=(0, 1))
    return shutil.copyfile(cand / "compare.png", IMAGES / "compare-example.png")


def prune_drop(work: Path) -> Path:
    """docs/img/prune-drop-example.png from prune-drop of the tiny random LLaMA with its angular result."""
    from factories import build_checkpoint
    from factories.files import TASKS_DIR

    model = build_checkpoint("llama", work / "tiny-llama-8", num_layers=8)
    out = work / "pd-example"
    corpus = ["--dataset", "builtin:pydoc", "--tokens", "8192", "--seq-len", "64"]
    layerprobe("angular", str(model), *corpus, *CPU, "--out", str(out))
    task = ["--task", "lp_pydoc_ppl", "--include-path", str(TASKS_DIR), "--limit", "15", "--seed", "1234"]
    layerprobe("prune-drop", str(model), *task, "--angular", str(out / "angular.json"), *CPU, "--out", str(out))
    return shutil.copyfile(out / "prune_drop_lp_pydoc_ppl.png", IMAGES / "prune-drop-example.png")


FIGURES = {"depth": depth, "compare": compare, "prune-drop": prune_drop}


def main() -> None:
    """Run the chosen figures' commands and copy each figure into docs/img."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", choices=sorted(FIGURES), default=sorted(FIGURES))
    parser.add_argument("--work", type=Path, default=None, help="where the runs go (default: a temporary folder)")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="layerprobe-images-"))
    work.mkdir(parents=True, exist_ok=True)
    for name in args.only:
        print(f"wrote {FIGURES[name](work)}")


if __name__ == "__main__":
    main()
