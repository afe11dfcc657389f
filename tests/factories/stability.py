"""The runs `layerprobe stability`'s tests read: angular.json and prune_drop.json of tiny models."""

from __future__ import annotations

from pathlib import Path

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
