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

from layerprobe.core import BUILTIN_CORPUS, AngularSpec, CorpusSpec, ModelSpec, PruneSpec
from layerprobe.measure import run_angular
from layerprobe.prune.drop import run_prune_drop
from layerprobe.results import RunDir, write_json

BLOCKS = 6
TOKENS = 768
SEQ = 48
TEXT = (
    "Layer pruning removes whole blocks of a transformer. The angular distance between the input and the output "
    "of a block says how much it turns the residual stream; a block that barely turns it may be lazy.\n"
)


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


def corpus(dataset: str = BUILTIN_CORPUS, **overrides) -> CorpusSpec:
    settings = dict(split="train", tokens=TOKENS, seq_len=SEQ)
    settings.update(overrides)
    return CorpusSpec(dataset, **settings)


def angular_run(
    model: Path, out: Path, dataset: str = BUILTIN_CORPUS, positions: str = "all", tokens: int = TOKENS
) -> Path:
    """angular.json of `model` on `dataset`, written into `out` as the command writes it."""
    spec = AngularSpec(ModelSpec(str(model), device="cpu"), corpus(dataset, tokens=tokens), positions, batch_size=4)
    result = run_angular(spec)
    return write_json(RunDir(out).angular_json, result.to_dict())


def corpus_drop_run(model: Path, out: Path, log_samples: bool = True) -> Path:
    """prune_drop.json of `--task corpus` (every block), with samples/corpus.jsonl when `log_samples`."""
    spec = PruneSpec(
        model=ModelSpec(str(model), device="cpu"),
        tasks=("corpus",),
        batch_size=4,
        log_samples=log_samples,
        corpus=corpus(),
    )
    run_prune_drop(spec, out)
    return RunDir(out).prune_drop_json


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
