"""What `--task corpus` runs and compares per batch, one class per estimator (`model.corpus_estimator`).

`CorpusScorer` (corpus_metric.py) owns the variants, the engines and the per-window bookkeeping; a pass
owns only three things: the batch inputs of some windows, the forward pass whose output is compared,
and the per-window comparison of a variant's output with the full model's. The four passes:

- `NextTokenPass`: causal LMs and teacher-forced encoder-decoders (final hidden states; the LM head is
  applied in slices of positions by `corpus_metric.compare_next_token`);
- `MaskedTokenPass`: masked LMs. Each window has 15 % of its non-special tokens replaced by the mask
  token, chosen by a generator seeded with (seed, window index) alone, so the full model and every
  variant see the very same masked windows however they are batched; only the masked positions'
  logits are computed (the head's output projection is given just those rows);
- `ClassLogitsPass`: image classifiers, the class logits of each image;
- `PooledPass`: towers without a head, the pooled output of the stack's tower (its `pooler_output`,
  else the mean of its last hidden states over positions) per window or image.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import torch
from torch import nn

from layerprobe.core import CorpusSpec, UnsupportedModel
from layerprobe.data import ImageWindow, Window, image_batch, images_before_loading, pack_corpus
from layerprobe.evaluate.corpus_compare import compare_logits, compare_next_token
from layerprobe.model import (
    CLASS_LOGITS,
    MASKED_TOKEN,
    NEXT_TOKEN,
    SEQ2SEQ,
    CorpusEstimator,
    LayerStack,
    LoadedModel,
    base_of,
    run_tower,
    tower_of,
)

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

MASK_FRACTION = 0.15  # of a window's non-special tokens, as BERT's pretraining masks
AnyWindow = Window | ImageWindow
PerWindow = dict[str, list[float]]


@dataclass
class Batch:
    """The inputs of one batch of windows, and what a pass needs besides them to compare outputs."""

    inputs: dict[str, torch.Tensor]
    rows: int
    targets: torch.Tensor | None = None  # the tokens predicted (next-token: the window; masked: the masked ones)
    owner: torch.Tensor | None = None  # masked: the row of each masked position
    extra: dict[str, torch.Tensor] = field(default_factory=dict)


class CorpusPass(Protocol):
    """One estimator's batch inputs, compared output and per-window comparison (see the module docstring)."""

    estimator: CorpusEstimator

    def windows(self, corpus: CorpusSpec) -> Sequence[AnyWindow]: ...

    def batch(self, group: Sequence[AnyWindow], first: int) -> Batch: ...

    def forward(self, batch: Batch) -> torch.Tensor: ...

    def compare(self, base: torch.Tensor, variant: torch.Tensor, batch: Batch) -> PerWindow: ...


def make_pass(estimator: CorpusEstimator, loaded: LoadedModel, stack: LayerStack, seed: int) -> CorpusPass:
    """The pass of `estimator` for this model and stack."""
    if estimator.name == NEXT_TOKEN:
        return NextTokenPass(estimator, loaded)
    if estimator.name == MASKED_TOKEN:
        return MaskedTokenPass(estimator, loaded, seed)
    if estimator.name == CLASS_LOGITS:
        return ClassLogitsPass(estimator, loaded)
    return PooledPass(estimator, loaded, stack)


def text_windows(loaded: LoadedModel, corpus: CorpusSpec) -> list[Window]:
    """The windows `angular` would measure for these options (seq_len capped by the model's context)."""
    seq_len = min(corpus.seq_len, loaded.context_length) if loaded.context_length else corpus.seq_len
    return pack_corpus(loaded.tokenizer, corpus, seq_len)


def corpus_items(estimator: CorpusEstimator, loaded: LoadedModel, corpus: CorpusSpec) -> Sequence[AnyWindow]:
    """The items the estimator scores: the corpus windows of a text stack, the images of a vision stack."""
    if not estimator.reads_images:
        return text_windows(loaded, corpus)
    found = images_before_loading(loaded.spec, corpus)
    if found is None:  # the skeleton's stack reads text although the estimator's reads images: a programming error
        raise RuntimeError(f"{estimator.name} reads images, but the stack of {loaded.spec.model} reads text")
    return found[1]


def _ids(group: Sequence[AnyWindow], device: torch.device | None) -> torch.Tensor:
    return torch.tensor([w.input_ids for w in group if isinstance(w, Window)], device=device)


class NextTokenPass:
    """Causal LMs and teacher-forced encoder-decoders: the final hidden states; see corpus_metric.py."""

    def __init__(self, estimator: CorpusEstimator, loaded: LoadedModel) -> None:
        self.estimator, self.loaded = estimator, loaded
        # Which window token a final hidden state at position t predicts: t+1 (causal LM), t (teacher-forced
        # decoder, whose input is the window shifted right).
        self.shift = 0 if loaded.kind == SEQ2SEQ else 1

    def windows(self, corpus: CorpusSpec) -> Sequence[AnyWindow]:
        return text_windows(self.loaded, corpus)

    def batch(self, group: Sequence[AnyWindow], first: int) -> Batch:
        ids = _ids(group, self.loaded.input_device)
        return Batch({"input_ids": ids}, len(group), targets=ids)

    def forward(self, batch: Batch) -> torch.Tensor:
        base = self.loaded.model.base_model
        if base is self.loaded.model and self.loaded.kind != SEQ2SEQ:
            # A head whose base_model_prefix names no attribute (mllama's text ForCausalLM) is its own
            # `base_model` and would return logits: its base is the child that owns the embeddings.
            base = base_of(self.loaded.model)
        return base(input_ids=batch.inputs["input_ids"], use_cache=False).last_hidden_state

    def compare(self, base: torch.Tensor, variant: torch.Tensor, batch: Batch) -> PerWindow:
        assert batch.targets is not None
        return compare_next_token(self.loaded.model, base, variant, batch.targets, self.shift)


def mask_positions(ids: Sequence[int], index: int, seed: int, special: set[int]) -> list[int]:
    """The positions of window `index` that are masked: 15 % of its non-special tokens (at least one).

    Drawn by a generator seeded from (seed, index) alone, so every variant and every batching masks the same.
    """
    candidates = [i for i, token in enumerate(ids) if token not in special]
    if not candidates:
        return []
    generator = torch.Generator().manual_seed(seed * 1_000_003 + index)
    count = max(1, round(MASK_FRACTION * len(candidates)))
    order = torch.randperm(len(candidates), generator=generator).tolist()[:count]
    return sorted(candidates[i] for i in order)


def check_mask_token(tokenizer: PreTrainedTokenizerBase, model: str) -> None:
    """A masked LM's tokenizer must define the mask token its head was trained to fill."""
    if getattr(tokenizer, "mask_token_id", None) is None:
        raise UnsupportedModel(
            f"{model} ships a masked-LM head, but its tokenizer defines no mask token to score it with.",
            hint='Set "mask_token" in its tokenizer_config.json (the token its head was trained on), then re-run.',
        )


class MaskedTokenPass:
    """Masked LMs: the head's logits at the masked positions of each window (module docstring)."""

    def __init__(self, estimator: CorpusEstimator, loaded: LoadedModel, seed: int) -> None:
        check_mask_token(loaded.tokenizer, loaded.spec.model)
        self.estimator, self.loaded, self.seed = estimator, loaded, seed
        self.special = set(loaded.tokenizer.all_special_ids)

    def windows(self, corpus: CorpusSpec) -> Sequence[AnyWindow]:
        return text_windows(self.loaded, corpus)

    def batch(self, group: Sequence[AnyWindow], first: int) -> Batch:
        device = self.loaded.input_device
        ids = _ids(group, device)
        chosen = torch.zeros_like(ids, dtype=torch.bool)
        for row, window in enumerate(group):
            assert isinstance(window, Window)
            for position in mask_positions(window.input_ids, first + row, self.seed, self.special):
                chosen[row, position] = True
        masked = ids.masked_fill(chosen, int(self.loaded.tokenizer.mask_token_id))
        owner = chosen.nonzero()[:, 0]
        return Batch({"input_ids": masked}, len(group), targets=ids[chosen], owner=owner, extra={"chosen": chosen})

    def forward(self, batch: Batch) -> torch.Tensor:
        """Logits (masked positions, vocab): the output projection is handed the masked rows only."""
        chosen = batch.extra["chosen"]
        projection = self.loaded.model.get_output_embeddings()
        if projection is None:  # a head without a separate projection: all logits, then the masked rows
            return self.loaded.model(input_ids=batch.inputs["input_ids"]).logits[chosen]

        def only_masked(_module: nn.Module, args: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
            return (args[0][chosen.to(args[0].device)], *args[1:])

        handle = projection.register_forward_pre_hook(only_masked)
        try:
            return self.loaded.model(input_ids=batch.inputs["input_ids"]).logits
        finally:
            handle.remove()

    def compare(self, base: torch.Tensor, variant: torch.Tensor, batch: Batch) -> PerWindow:
        assert batch.owner is not None and batch.targets is not None
        return compare_logits(base, variant, batch.owner, batch.rows, batch.targets)


class ClassLogitsPass:
    """Image classifiers: each image's class logits, no labels (KL and top-1 agreement with the full model)."""

    def __init__(self, estimator: CorpusEstimator, loaded: LoadedModel) -> None:
        self.estimator, self.loaded = estimator, loaded

    def windows(self, corpus: CorpusSpec) -> Sequence[AnyWindow]:
        return corpus_items(self.estimator, self.loaded, corpus)

    def batch(self, group: Sequence[AnyWindow], first: int) -> Batch:
        images = [w for w in group if isinstance(w, ImageWindow)]
        return Batch(image_batch(images, self.loaded.input_device), len(group))

    def forward(self, batch: Batch) -> torch.Tensor:
        return self.loaded.model(**batch.inputs).logits

    def compare(self, base: torch.Tensor, variant: torch.Tensor, batch: Batch) -> PerWindow:
        owner = torch.arange(batch.rows, device=variant.device)
        found = compare_logits(base, variant, owner, batch.rows, None)
        return {key: found[key] for key in ("kl", "top1")}


class PooledPass:
    """Towers without a head: the tower's pooled output per window or image, compared by cosine distance."""

    def __init__(self, estimator: CorpusEstimator, loaded: LoadedModel, stack: LayerStack) -> None:
        self.estimator, self.loaded, self.tower = estimator, loaded, tower_of(stack)

    def windows(self, corpus: CorpusSpec) -> Sequence[AnyWindow]:
        return corpus_items(self.estimator, self.loaded, corpus)

    def batch(self, group: Sequence[AnyWindow], first: int) -> Batch:
        device = self.loaded.input_device
        if isinstance(group[0], ImageWindow):
            return Batch(image_batch([w for w in group if isinstance(w, ImageWindow)], device), len(group))
        return Batch({"input_ids": _ids(group, device)}, len(group))

    def forward(self, batch: Batch) -> torch.Tensor:
        return pooled_output(run_tower(self.loaded.model, self.tower, batch.inputs))

    def compare(self, base: torch.Tensor, variant: torch.Tensor, batch: Batch) -> PerWindow:
        cosine = nn.functional.cosine_similarity(base.double(), variant.double().to(base.device), dim=-1)
        return {"cosine": (1.0 - cosine).tolist()}


def pooled_output(output: object) -> torch.Tensor:
    """A tower's pooled output (batch, hidden): its `pooler_output`, else the mean of its last hidden states."""
    pooled = getattr(output, "pooler_output", None)
    if isinstance(pooled, torch.Tensor):
        return pooled.reshape(pooled.shape[0], -1)
    hidden = getattr(output, "last_hidden_state", None)
    if not isinstance(hidden, torch.Tensor):
        raise UnsupportedModel(
            f"The tower's forward returns {type(output).__name__}, with neither a pooled output nor final hidden "
            "states to score.",
            hint="Score it with --task corpus on a checkpoint that ships its head, or measure it with angular.",
        )
    return hidden.mean(dim=1)
