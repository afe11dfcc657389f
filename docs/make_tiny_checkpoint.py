"""Build the tiny random checkpoints the README's examples run on, offline, from a checkout of this repository.

    python docs/make_tiny_checkpoint.py tiny-llama-8                 # LLaMA, 8 blocks, 48 wide (causal LM)
    python docs/make_tiny_checkpoint.py tiny-bert-qa --arch bert_qa  # BERT with a QA head (needs the demo extra)

The checkpoints are the test suite's own (tests/factories/checkpoints.py): a `transformers` config, random
weights (seeded) with random norm gains, and a 512-token byte-level BPE tokenizer trained on the standard
library's pydoc text, saved with `save_pretrained` like a hub download; a causal LM's tokenizer also gets a
small chat template (for `--chat-template`). Every layerprobe command takes the
directory in place of a hub id. The numbers they give are those of random weights: they show what the
outputs look like, not what a trained model does. Real pretrained weights offline: `layerprobe demo`
(MiniLM-L6, from the demo extra).
"""

from __future__ import annotations

import argparse
from pathlib import Path

# This checkout and its tests' builders on the import path, offline settings (docs/doc_fixtures.py).
from doc_fixtures import build_tiny

# The tests' builders (tests/factories), importable once doc_fixtures has set the path.
from factories import TINY_ARCHITECTURES  # noqa: E402


def main() -> None:
    """Parse the arguments and build one checkpoint."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("directory", type=Path, help="where to save the checkpoint (created)")
    parser.add_argument("--arch", default="llama", choices=[*TINY_ARCHITECTURES, "bert_qa"])
    parser.add_argument("--layers", type=int, default=8, help="number of blocks")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    path = build_tiny(args.directory, args.arch, args.layers, args.seed)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
