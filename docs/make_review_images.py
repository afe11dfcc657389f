"""Make the README's pictures of `layerprobe track` and `layerprobe report` from real runs on fixtures.

Five checkpoints of one imitated training run (`run/checkpoint-1000` … `checkpoint-5000`) are built from
the tests' tiny random LLaMA (8 blocks, tests/factories.py): the output projections (attention `o_proj`,
MLP `down_proj`) of the shallow blocks 0-3 are scaled by 3, those of the deep blocks 4-7 by a factor
that grows from 0.1 to 6 over the checkpoints, so the deep blocks go from lazy (their update barely turns
the residual stream) to awake, the way Mix-LN and LayerNorm Scaling wake the deep blocks Pre-LN leaves
lazy. Each checkpoint is
measured by the real commands (angular, prune-drop on the task-free corpus metrics, depth --grad,
prune-curve), then `layerprobe track` and `layerprobe report` run over the five run directories, and
a headless chromium (Debian's package) takes the report's screenshot at 1,280 px.

    python docs/make_review_images.py                  # writes docs/img/report.png, docs/img/track-*.png
    python docs/make_review_images.py --work /tmp/lp   # keep the checkpoints and run directories there

Offline and CPU-only: a few minutes on a laptop. The numbers are of random weights: only the shape of the
history means something (deep blocks waking), not any score.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

# This checkout and its tests' builders on the import path, offline settings (docs/doc_fixtures.py).
from doc_fixtures import IMAGES, layerprobe, tiny_llama

# The browser tests' own helper (tests/headless_chromium.py), importable once the path is set.
from headless_chromium import find_chromium, screenshot

STEPS = (1000, 2000, 3000, 4000, 5000)
DEEP = range(4, 8)  # the blocks that wake up
SHALLOW_SCALE = 3.0
CORPUS = ["--dataset", "builtin:pydoc", "--seq-len", "64", "--device", "cpu", "--quiet"]


def scale(step: int, block: int) -> float:
    """A block's output scale at a checkpoint: 3 for the shallow blocks; 0.1 at step 1000 to 6 at 5000 for the deep."""
    if block not in DEEP:
        return SHALLOW_SCALE
    return 0.1 + 5.9 * (step - STEPS[0]) / (STEPS[-1] - STEPS[0])


def build_run(work: Path) -> list[Path]:
    """The checkpoints of the imitated training run, each saved like a Trainer's checkpoint-N."""
    import torch
    import transformers as tf

    base = tiny_llama(work / "base")
    checkpoints = []
    for step in STEPS:
        model = tf.AutoModelForCausalLM.from_pretrained(base)
        with torch.no_grad():
            for l, layer in enumerate(model.model.layers):
                layer.self_attn.o_proj.weight.mul_(scale(step, l))
                layer.mlp.down_proj.weight.mul_(scale(step, l))
        target = work / "run" / f"checkpoint-{step}"
        model.save_pretrained(target)
        tf.AutoTokenizer.from_pretrained(base).save_pretrained(target)
        checkpoints.append(target)
    return checkpoints


def measure(work: Path, checkpoint: str, out: str) -> None:
    """Every measuring command on one checkpoint, into its run directory (paths relative to `work`)."""
    layerprobe("angular", checkpoint, "--tokens", "4096", *CORPUS, "--out", out, cwd=work)
    layerprobe("depth", checkpoint, "--tokens", "1024", "--grad", *CORPUS, "--out", out, cwd=work)
    task = ["--task", "corpus", "--tokens", "2048", "--batch-size", "8"]
    layerprobe("prune-drop", checkpoint, *task, *CORPUS, "--out", out, cwd=work)
    curve = [*task, "--angular", f"{out}/angular.json", "--max-fraction", "0.5"]
    layerprobe("prune-curve", checkpoint, *curve, *CORPUS, "--out", out, cwd=work)


def main() -> None:
    """Build, measure, track, report, screenshot."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, help="Where to keep checkpoints and runs (default: a temporary folder).")
    parser.add_argument("--chromium", default=find_chromium(), help="The browser (default: Debian's chromium).")
    args = parser.parse_args()
    work = (args.work or Path(tempfile.mkdtemp(prefix="layerprobe-review-images-"))).resolve()
    runs = []
    for checkpoint in build_run(work):  # run in `work` with relative paths: the figures name `run`, not `work`
        runs.append(f"runs/{checkpoint.name}")
        measure(work, str(checkpoint.relative_to(work)), runs[-1])
    track = work / "track"
    layerprobe("track", *runs, "--out", "track", "--format", "markdown", "--quiet", cwd=work)
    layerprobe("report", *runs, "--out", "track/report.html", "--quiet", cwd=work)
    IMAGES.mkdir(parents=True, exist_ok=True)
    for what in ("heat", "lazy", "delta"):
        shutil.copy(track / f"track_{what}.png", IMAGES / f"track-{what}.png")
    if args.chromium is None:
        raise SystemExit("no chromium: apt-get install chromium, or pass --chromium PATH")
    screenshot(args.chromium, track / "report.html", IMAGES / "report.png", height=1700)
    print(f"wrote {IMAGES / 'report.png'} and {', '.join(f'track-{w}.png' for w in ('heat', 'lazy', 'delta'))}")
    print(f"runs, track and report under {work}")


if __name__ == "__main__":
    main()
