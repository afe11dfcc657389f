"""`--task corpus`: a task-free score of a pruned model on the neutral corpus that `angular` reads.

Per window of the corpus (the same `--dataset/--tokens/--seq-len` windows as `angular`), every variant
gets, over the window's next-token predictions t = 0 … T-2 (token t+1 predicted from tokens ≤ t):

- `nll`: mean −log P_variant(token t+1), and `perplexity` = exp(mean over windows of the window's nll);
- `kl`: mean KL(P_base ‖ P_variant) = Σ_v P_base(v) (log P_base(v) − log P_variant(v)), in nats;
- `top1_agreement`: fraction of positions where argmax P_variant = argmax P_base.

A metric's value is the mean of its per-window values (every window but possibly the last has the same
length), so prune-drop's paired stderr applies window by window (perplexity: a paired
bootstrap with lm-eval's `perplexity` aggregation on the windows' mean log-likelihoods).

Engine ("shared" unless `--engine simple`): per batch of windows, one baseline pass records x^l, the
input of the first removed block of every variant, and the base model's final hidden states. The
variant "blocks [l, l+n) removed" then feeds x^l straight to block l+n and runs only the blocks after it.
With prune-drop's `--span n` a variant l is the span [l, l+n); with `--unit attention|mlp` it is block l
with that sublayer's output zeroed (`model.Remover`), scored by a full forward pass of the ablated model
(both engines: nothing before block l changes, but no pass is shared).

Memory: never corpus × vocabulary. Base log-probabilities are recomputed from the kept base final
hidden states (batch × T × hidden) and compared with the variant's in slices of positions, so at most
`_LOGIT_BYTES` of logits exist at once; recorded block inputs are batch × T × hidden per variant start.
Only per-window floats are kept across batches.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Hashable, Iterator
from typing import TYPE_CHECKING

import torch
from torch import nn

from layerprobe.core import CORPUS_TASK
from layerprobe.data import batches, pack_corpus
from layerprobe.evaluate.paired import MEAN
from layerprobe.evaluate.replay import Replay, head_logits, output_arity
from layerprobe.model import (
    SEQ2SEQ,
    LayerStack,
    Remover,
    base_of,
    capture_block_states,
    image_only_blocks,
    removed_blocks,
)
from layerprobe.results import Evaluation, MetricSamples, MetricScore

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from layerprobe.core import CorpusSpec
    from layerprobe.data import Window
    from layerprobe.model import LoadedModel

Span = tuple[int, ...]  # the removed blocks of one variant, consecutive; () is the baseline
_LOGIT_BYTES = 256 * 1024**2  # logits (base and variant, float32) alive at once per slice of positions
METRICS = ("nll", "perplexity", "kl", "top1_agreement")
_HIGHER_IS_BETTER = {"nll": False, "perplexity": False, "kl": False, "top1_agreement": True}


def as_span(variant: int | Span | None) -> Span:
    """A variant as its removed blocks: None → (), l → (l,), a span stays as it is."""
    if variant is None:
        return ()
    if isinstance(variant, int):
        return (variant,)
    return tuple(variant)


def corpus_windows(loaded: LoadedModel, corpus: CorpusSpec) -> list[Window]:
    """The windows `angular` would measure for these options (seq_len capped by the model's context)."""
    seq_len = min(corpus.seq_len, loaded.context_length) if loaded.context_length else corpus.seq_len
    return pack_corpus(loaded.tokenizer, corpus, seq_len)


class CorpusScorer:
    """Scores the `corpus` task for the baseline and every given variant, all computed on first use.

    `variants` are sets of removed blocks, sorted (a block index l means (l,), or [l, l+n) with a
    `remover` of span n; with a sublayer `remover`, block l's sublayer; a span of consecutive blocks is one
    such set). The first `score` runs the whole corpus once for every variant (shared prefixes: a variant
    replays the recorded input of its first removed block and runs only the kept blocks after it), later
    calls read the per-window values back, like the shared-prefix lm-eval engine's store. With `ablate`,
    variants are any keys and `ablate(key)` applies one in memory (e.g. zeroed sublayers); each then runs
    the whole model (the simple engine).
    """

    reports_progress = False

    def __init__(
        self,
        loaded: LoadedModel,
        stack: LayerStack,
        corpus: CorpusSpec,
        variants: list[int | Span],
        batch_size: int | str = 8,  # "auto" (lm-eval's word for prune-drop's other tasks): 8
        engine: str = "shared",
        windows: list[Window] | None = None,
        remover: Remover | None = None,
        ablate: Callable[[Hashable], contextlib.AbstractContextManager[object]] | None = None,
    ) -> None:
        self.loaded, self.stack, self.corpus = loaded, stack, corpus
        # An encoder-decoder's blocks pass more than hidden states (T5: the position bias of block 0), which
        # a replayed block could not: its variants run the whole model without their blocks.
        simple = engine == "simple" or ablate is not None or loaded.kind == SEQ2SEQ
        self.engine = "simple" if simple else "shared"
        # Which window token a final hidden state at position t predicts: t+1 (causal LM), t (teacher-forced
        # decoder, whose input is the window shifted right).
        self.shift = 0 if loaded.kind == SEQ2SEQ else 1
        self.ablate = ablate
        self.sublayer = remover if remover is not None and remover.ablation.is_sublayer else None
        self.span_length = remover.ablation.span if remover is not None and self.sublayer is None else 1
        self.variants = list(dict.fromkeys(self.span_of(v) for v in variants if self.span_of(v)))
        for span in self.variants if ablate is None else []:
            if list(span) != sorted(set(span)) or span[-1] >= stack.num_layers or span[0] < 0:
                raise ValueError(f"not a sorted set of distinct blocks of a {stack.num_layers}-block model: {span}")
        self.batch_size = max(1, int(batch_size)) if batch_size != "auto" else 8
        self.windows = windows if windows is not None else corpus_windows(loaded, corpus)
        self.active: Span = ()
        self.values: dict[Span, dict[str, list[float]]] | None = None

    def span_of(self, variant: int | Span | None) -> Span:
        """A variant as its removed blocks: None → (), l → [l, l+n) (n: the remover's span), a span as it is."""
        if isinstance(variant, int):
            return tuple(range(variant, variant + self.span_length))
        return as_span(variant)

    @contextlib.contextmanager
    def variant(self, layer: int | Span | None) -> Iterator[None]:
        self.active = self.span_of(layer)
        try:
            yield
        finally:
            self.active = ()

    def score(self, task: str = CORPUS_TASK) -> Evaluation:
        if self.values is None:
            self.values = self._compute()
        if self.active not in self.values:
            raise KeyError(f"variant {self.active} was not given to the corpus scorer")
        return _evaluation(self.values[self.active], self.engine)

    # the work --------------------------------------------------------------------------------------
    @torch.inference_mode()
    def _compute(self) -> dict[Span, dict[str, list[float]]]:
        values: dict[Span, dict[str, list[float]]] = {
            s: {m: [] for m in ("nll", "kl", "top1")} for s in [()] + self.variants
        }
        starts = sorted({span[0] for span in self.variants}) if self.sublayer is None and self.ablate is None else []
        for group in batches(self.windows, self.batch_size):
            ids = torch.tensor([w.input_ids for w in group], device=self.loaded.input_device)
            with capture_block_states(self.stack, image_only_blocks(self.stack)) as states:
                base_final = self._base_forward(ids)
            recorded = {l: states[l] for l in starts} if self.engine == "shared" and self.ablate is None else {}
            del states
            _append(values[()], _compare(self.loaded.model, base_final, base_final, ids, self.shift))
            for span in self.variants:
                final = self._variant_final(span, ids, recorded.get(span[0]))
                _append(values[span], _compare(self.loaded.model, base_final, final, ids, self.shift))
        return values

    def _variant_final(self, span: Span, ids: torch.Tensor, x_start: torch.Tensor | None) -> torch.Tensor:
        if self.sublayer is not None:  # block span[0] stays, its sublayer's output is zero: a full pass
            with self.sublayer.variant(span[0]):
                return self._base_forward(ids)
        if self.ablate is not None:
            with self.ablate(span):
                return self._base_forward(ids)
        if x_start is None:  # the simple engine: the whole model without the blocks
            with removed_blocks(self.stack, list(span)):
                return self._base_forward(ids)

        if not hasattr(self, "_arity"):
            self._arity = output_arity(self.stack, ids, self._base_forward)
        first = span[0]
        # Keep block `first` as the new first block, standing in for it a replay of x^first: the next
        # kept block (first+n for a span) thus receives x^first, exactly as with the blocks deleted.
        with removed_blocks(self.stack, [*range(first), *span[1:]]) as shrunk:
            block = shrunk.blocks[0]
            shrunk.blocks[0] = Replay(x_start, self._arity, like=block)
            try:
                return self._base_forward(ids)
            finally:
                shrunk.blocks[0] = block

    def _base_forward(self, ids: torch.Tensor) -> torch.Tensor:
        base = self.loaded.model.base_model
        if base is self.loaded.model and self.loaded.kind != SEQ2SEQ:
            # A head whose base_model_prefix names no attribute (mllama's text ForCausalLM) is its own
            # `base_model` and would return logits: its base is the child that owns the embeddings.
            base = base_of(self.loaded.model)
        return base(input_ids=ids, use_cache=False).last_hidden_state


def _compare(
    model: PreTrainedModel, base_final: torch.Tensor, final: torch.Tensor, ids: torch.Tensor, shift: int = 1
) -> dict[str, list[float]]:
    """Per-window mean NLL, KL(base ‖ variant) and top-1 agreement, from final hidden states.

    The state at position t predicts token t + `shift` (1: a causal LM; 0: a teacher-forced decoder).
    Positions are sliced so that base and variant logits of at most `_LOGIT_BYTES` exist at once.
    """
    rows, width = ids.shape[0], ids.shape[1] - shift
    vocab = model.get_output_embeddings().weight.shape[0]
    per_slice = max(1, _LOGIT_BYTES // (4 * 4 * vocab))  # base + variant logits and their log-softmaxes
    sums = {k: torch.zeros(rows, dtype=torch.float64, device=final.device) for k in ("nll", "kl", "top1")}
    flat_base = base_final[:, :width].reshape(rows * width, -1)
    flat_var = final[:, :width].reshape(rows * width, -1)
    targets = ids[:, shift:].reshape(-1).to(final.device)
    owner = torch.arange(rows, device=final.device).repeat_interleave(width)
    for start in range(0, rows * width, per_slice):
        part = slice(start, start + per_slice)
        base = nn.functional.log_softmax(head_logits(model, flat_base[part]).float(), dim=-1)
        var = nn.functional.log_softmax(head_logits(model, flat_var[part]).float(), dim=-1)
        nll = -var.gather(1, targets[part, None]).squeeze(1)
        kl = (base.exp() * (base - var)).sum(-1)
        top1 = (base.argmax(-1) == var.argmax(-1)).double()
        for key, value in (("nll", nll), ("kl", kl), ("top1", top1)):
            sums[key].index_add_(0, owner[part], value.double())
    return {k: (v / width).tolist() for k, v in sums.items()}


def _append(into: dict[str, list[float]], found: dict[str, list[float]]) -> None:
    for key, values in found.items():
        into[key].extend(values)


def _mean_and_stderr(values: list[float]) -> tuple[float, float | None]:
    n = len(values)
    mean = math.fsum(values) / n
    if n < 2:
        return mean, None
    var = math.fsum((v - mean) ** 2 for v in values) / (n - 1)
    return mean, math.sqrt(var / n)


def _evaluation(values: dict[str, list[float]], engine: str) -> Evaluation:
    """The typed Evaluation: window means with stderrs, and per-window values for the paired ΔP."""
    n = len(values["nll"])
    docs = {key: dict(enumerate(vals)) for key, vals in values.items()}
    metrics: dict[str, MetricScore] = {}
    per_sample: dict[str, MetricSamples] = {}
    for name, key in (("nll", "nll"), ("kl", "kl"), ("top1_agreement", "top1")):
        value, stderr = _mean_and_stderr(values[key])
        metrics[name] = MetricScore(value, stderr, _HIGHER_IS_BETTER[name], n)
        per_sample[name] = MetricSamples(MEAN, {CORPUS_TASK: docs[key]})
    nll = metrics["nll"]
    ppl = math.exp(nll.value)  # delta method: d exp(x) = exp(x) dx
    metrics["perplexity"] = MetricScore(ppl, None if nll.stderr is None else ppl * nll.stderr, False, n)
    # lm-eval's `perplexity` aggregation is exp(−mean(items)) over log-likelihoods.
    per_sample["perplexity"] = MetricSamples("perplexity", {CORPUS_TASK: {i: -v for i, v in docs["nll"].items()}})
    ordered = {m: metrics[m] for m in METRICS}
    return Evaluation(ordered, num_fewshot=0, samples=n, engine=engine, per_sample={m: per_sample[m] for m in METRICS})
