"""Make the README's figures from the very runs whose output the README shows (docs/make_samples.py).

    python docs/make_images.py                        # every figure below, into docs/img/
    python docs/make_images.py --only depth compare   # some of them
    python docs/make_images.py --work /tmp/lp         # keep the run directories there

Each figure is drawn by the commands of one or more README samples (SAMPLES in docs/make_samples.py), run
in one directory as make_samples.py runs them, so a picture and the numbers printed beside it come from the
same run:

- `angular-minilm.png`: the heatmap of the `demo` sample (the real MiniLM-L6, 4,096 tokens of pydoc).
- `compare-example.png`: the `compare` sample's figure (a 1,024-token demo run gated against the 4,096-token
  one with `--adjacent-tolerance 0.001`; it fails on purpose).
- `prune-drop-example.png`: the `prune-drop-tasks` sample's perplexity bars (tiny random LLaMA, local tasks).
- `prune-curve-strategies.png`: the `prune-curve` sample's curves, one line per strategy.
- `stability-example.png`: the `stability` sample's matrices.
- `flip-rate-example.png`: the `flip-rate` sample's bars (a generating task: ΔP and the flip rate per filter).
- `depth-minilm.png`: the `depth-minilm` sample's figure (the real MiniLM-L6).

Offline and CPU-only (a few minutes in all). The numbers of the tiny model are of random weights.
The track and report pictures come from docs/make_review_images.py.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import shutil
import tempfile
from pathlib import Path

# This checkout and its tests' builders on the import path, offline settings (docs/doc_fixtures.py).
from doc_fixtures import IMAGES
from make_samples import SAMPLES, make_blocks

# figure → (the samples whose commands draw it, the file they write, its name under docs/img)
FIGURES = {
    "angular": (("demo",), "base/angular.png", "angular-minilm.png"),
    "compare": (("demo", "compare"), "cand/compare.png", "compare-example.png"),
    "prune-drop": (("prune-drop-tasks",), "runs/pd-example/prune_drop_lp_pydoc_ppl.png", "prune-drop-example.png"),
    "prune-curve": (("prune-curve",), "runs/pydoc/prune_curve_corpus.png", "prune-curve-strategies.png"),
    "stability": (("prune-curve", "stability"), "runs/stability/stability.png", "stability-example.png"),
    "flip-rate": (("flip-rate",), "runs/gsm/prune_drop_lp_gsm_like.png", "flip-rate-example.png"),
    "depth": (("depth-minilm",), "runs/depth-minilm/depth.png", "depth-minilm.png"),
}


def main() -> None:
    """Run the chosen figures' samples once, in one directory, and copy each figure into docs/img."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", choices=sorted(FIGURES), default=sorted(FIGURES))
    parser.add_argument("--work", type=Path, default=None, help="where the runs go (default: a temporary folder)")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="layerprobe-images-"))
    work.mkdir(parents=True, exist_ok=True)
    needed = {name for figure in args.only for name in FIGURES[figure][0]}
    assert needed <= {s.name for s in SAMPLES}, needed
    with contextlib.redirect_stderr(io.StringIO()):
        make_blocks(work, only=needed)
    IMAGES.mkdir(parents=True, exist_ok=True)
    for figure in args.only:
        _, made, name = FIGURES[figure]
        shutil.copyfile(work / made, IMAGES / name)
        print(f"wrote {IMAGES / name}")
    print(f"runs under {work}")


if __name__ == "__main__":
    main()
