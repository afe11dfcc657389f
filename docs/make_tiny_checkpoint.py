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
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# The tests' builders (tests/factories), importable once the path is set.
from factories import TINY_ARCHITECTURES, build_checkpoint  # noqa: E402

# A BOS, then each turn as `<|role|>` and its text, closed by an EOS (the shape of LLaMA-3's template).
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}{{ eos_token }}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


def add_chat_template(path: Path) -> None:
    """Give the checkpoint's tokenizer CHAT_TEMPLATE."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(path)


def main() -> None:
    """Parse the arguments and build one checkpoint."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("directory", type=Path, help="where to save the checkpoint (created)")
    parser.add_argument("--arch", default="llama", choices=[*TINY_ARCHITECTURES, "bert_qa"])
    parser.add_argument("--layers", type=int, default=8, help="number of blocks")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    path = build_checkpoint(args.arch, args.directory, num_layers=args.layers, seed=args.seed)
    if args.arch not in ("bert", "bert_qa"):
        add_chat_template(path)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
