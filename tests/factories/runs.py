"""The specs of the runs the tests make: small, offline, and the same from one test to the next."""

from __future__ import annotations

from pathlib import Path

from factories.files import TASKS, TASKS_DIR
from layerprobe.core import BUILTIN_CORPUS, AngularSpec, CorpusSpec, DepthSpec, ModelSpec, PruneSpec

# prune-drop on the local tasks: few documents, two-shot, seeded, scored by lm-eval's own path.
PRUNE_SETTINGS = dict(
    tasks=TASKS, layers="0,3", limit=3, num_fewshot=2, batch_size=4, seed=1234, include_path=str(TASKS_DIR)
)
# depth: 192 tokens of the builtin corpus in windows of 32.
DEPTH_TOKENS, DEPTH_SEQ = 192, 32


def prune_spec(path, dtype: str = "auto", **settings) -> PruneSpec:
    """A prune-drop spec of the checkpoint at `path` on the CPU: `PRUNE_SETTINGS`, the simple engine, `settings`."""
    values = {**PRUNE_SETTINGS, "engine": "simple", **settings}
    values["tasks"] = tuple(values["tasks"])
    return PruneSpec(model=ModelSpec(str(path), device="cpu", dtype=dtype), **values)


def angular_spec(path, tokens=700, seq_len=96, positions="all", batch_size=3) -> AngularSpec:
    """An angular spec of the checkpoint at `path` on the CPU, over the builtin corpus."""
    return AngularSpec(
        ModelSpec(str(path), device="cpu"),
        CorpusSpec(BUILTIN_CORPUS, None, "train", "text", tokens, seq_len),
        positions=positions,
        batch_size=batch_size,
    )


def depth_spec(path: Path, **settings) -> DepthSpec:
    """A depth spec of the checkpoint at `path` in float32 on the CPU, over `DEPTH_TOKENS` builtin tokens."""
    corpus = CorpusSpec(BUILTIN_CORPUS, None, "train", "text", settings.pop("tokens", DEPTH_TOKENS), DEPTH_SEQ)
    return DepthSpec(ModelSpec(str(path), device="cpu", dtype="float32"), corpus, **settings)


def depth_windows(path, tokens: int = DEPTH_TOKENS):
    """The windows a depth run of the checkpoint at `path` reads (its tokenizer, the builtin corpus)."""
    import transformers as tf

    from layerprobe.data import build_windows, iter_documents

    tokenizer = tf.AutoTokenizer.from_pretrained(path)
    corpus = CorpusSpec(BUILTIN_CORPUS, None, "train", "text", tokens, DEPTH_SEQ)
    return build_windows(tokenizer, iter_documents(corpus), tokens, DEPTH_SEQ)


def loaded_head(path):
    """The checkpoint at `path` loaded with its head on the CPU, as prune-drop loads it."""
    from layerprobe.model.load import load_model

    return load_model(ModelSpec(str(path), device="cpu"), purpose="head")


# prune-drop split over shards or ranks: every block of two tasks, four documents each.
SHARD_SETTINGS = dict(tasks=("lp_arc_like", "lp_pydoc_ppl"), layers="0-3", limit=4)
