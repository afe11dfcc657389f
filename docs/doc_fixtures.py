"""What the docs' scripts share: this checkout on the import path, offline settings, the tiny LLaMA, a command.

docs/make_samples.py, docs/make_images.py, docs/make_review_images.py and docs/make_tiny_checkpoint.py import
this module first (it sits beside them, so `python docs/make_….py` finds it): it puts the checkout and its
tests/ (the tests' builders in tests/factories) on the import path and sets the environment every run of
the docs uses (offline, no tokenizer threads, no plot window).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
IMAGES = ROOT / "docs" / "img"
sys.path[:0] = [p for p in (str(ROOT), str(ROOT / "tests")) if p not in sys.path]
for name, value in {
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "MPLBACKEND": "Agg",
}.items():
    os.environ.setdefault(name, value)

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


def build_tiny(path: Path, arch: str = "llama", layers: int = 8, seed: int = 0) -> Path:
    """The tests' tiny random checkpoint at `path`; a causal LM's tokenizer also gets CHAT_TEMPLATE."""
    from factories import build_checkpoint

    built = build_checkpoint(arch, path, num_layers=layers, seed=seed)
    if arch not in ("bert", "bert_qa"):
        add_chat_template(built)
    return built


def tiny_llama(path: Path) -> Path:
    """`tiny-llama-8` as `python docs/make_tiny_checkpoint.py tiny-llama-8` builds it (8 blocks, seed 0)."""
    return build_tiny(path)


def layerprobe(*args: str, allowed: tuple[int, ...] = (0,), cwd: Path | None = None) -> int:
    """A layerprobe command of this checkout in its own process, as a user runs it; exit statuses in `allowed` pass."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-m", "layerprobe", *args], env=env, cwd=cwd, check=False)
    if done.returncode not in allowed:
        raise SystemExit(f"layerprobe {' '.join(args)} exited with {done.returncode}")
    return done.returncode
