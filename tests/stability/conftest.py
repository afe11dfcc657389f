"""Fixtures of issue #20 §2, built once per session: tiny checkpoints and the result files `stability` reads.

Runs go through the library calls the commands use (`run_angular`, `run_prune_drop`) on tiny random
models, written where the commands would write them, so `layerprobe stability` reads real files:

- `llama`: a 6-block LLaMA; `llama_copy`: the same files under another path; `llama_other`: the same
  architecture with other weights; `llama_deep`: 8 blocks; `gpt2`: another architecture (6 blocks).
- `runs`: angular.json on two corpora (builtin:pydoc, a local text file) and with `--positions last`;
  prune_drop.json of `--task corpus` with its `samples/` (per-document values) and without them.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from factories import build_checkpoint
from factories.stability import BLOCKS, TEXT, angular_run, corpus_drop_run


@pytest.fixture(scope="session")
def checkpoints(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("stability-checkpoints")
    built = {
        "llama": build_checkpoint("llama", root / "llama", num_layers=BLOCKS),
        "llama_other": build_checkpoint("llama", root / "llama_other", num_layers=BLOCKS, seed=1),
        "llama_deep": build_checkpoint("llama", root / "llama_deep", num_layers=BLOCKS + 2),
        "gpt2": build_checkpoint("gpt2", root / "gpt2", num_layers=BLOCKS),
    }
    built["llama_copy"] = Path(shutil.copytree(built["llama"], root / "copy" / "llama"))
    return built


@pytest.fixture(scope="session")
def text_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("stability-corpus") / "notes.txt"
    path.write_text(TEXT * 60, encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def runs(checkpoints, text_file, tmp_path_factory) -> dict[str, Path]:
    """Result files of the 6-block LLaMA, by name (each in its own run directory, named like the key)."""
    root = tmp_path_factory.mktemp("stability-runs")
    model = checkpoints["llama"]
    return {
        "pydoc": angular_run(model, root / "pydoc"),
        "notes": angular_run(model, root / "notes", str(text_file)),
        "last": angular_run(model, root / "last", positions="last"),
        "corpus": corpus_drop_run(model, root / "corpus"),
        "nosamples": corpus_drop_run(model, root / "nosamples", log_samples=False),
    }
