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

Other models get another estimator (`model.corpus_estimator`, one rule: the head the checkpoint ships
for the measured stack): a masked LM its masked-token predictions (same metrics), an image classifier
KL and top-1 agreement of its class logits per image, a tower without a head the cosine distance of its
pooled output per window or image (`cosine_distance`). What each compares is `corpus_passes.py`.

Memory: never corpus × vocabulary. Base log-probabilities are recomputed from the kept base final
hidden states (batch × T × hidden) and compared with the variant's in slices of positions, so at most
`_LOGIT_BYTES` of logits exist at once; recorded block inputs are batch × T × hidden per variant start.
Only per-window floats are kept across batches.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Hashable, Iterator, Sequence
from typing import TYPE_CHECKING

import torch

from layerprobe.core import CORPUS_TASK, SQUAD_TASK, TaskError
from layerprobe.data import batches
from layerprobe.evaluate.corpus_passes import MASK_FRACTION, AnyWindow, Batch, make_pass, text_windows
from layerprobe.evaluate.paired import MEAN
from layerprobe.evaluate.replay import Replay, output_arity
from layerprobe.model import (
    CAUSAL_LM,
    CORPUS_RULE,
    EXTRACTIVE_QA,
    MASKED_TOKEN,
    SEQ2SEQ,
    TEXT,
    CorpusEstimator,
    LayerStack,
    Remover,
    capture_block_states,
    corpus_estimator,
    find_layers,
    image_only_blocks,
    model_kind,
    removed_blocks,
    skeleton_tower,
    tower_of,
)
from layerprobe.results import Evaluation, MetricSamples, MetricScore

if TYPE_CHECKING:
    from transformers import PretrainedConfig

    from layerprobe.core import CorpusSpec, ModelSpec
    from layerprobe.data import Window
    from layerprobe.model import LoadedModel

Span = tuple[int, ...]  # the removed blocks of one variant, consecutive; () is the baseline
METRICS = ("nll", "perplexity", "kl", "top1_agreement")  # the next-token (and masked-token) estimator's
_HIGHER_IS_BETTER = {"nll": False, "perplexity": False, "kl": False, "top1_agreement": True, "cosine_distance": False}
_KEYS = {"nll": "nll", "kl": "kl", "top1_agreement": "top1", "cosine_distance": "cosine"}  # metric → per-window key
DEFAULT_MASK_SEED = 1234  # prune-drop's --seed when the caller gives none (lm-eval's default seed)


def as_span(variant: int | Span | None) -> Span:
    """A variant as its removed blocks: None → (), l → (l,), a span stays as it is."""
    if variant is None:
        return ()
    if isinstance(variant, int):
        return (variant,)
    return tuple(variant)


def corpus_windows(loaded: LoadedModel, corpus: CorpusSpec) -> list[Window]:
    """The windows `angular` would measure for these options (seq_len capped by the model's context)."""
    return text_windows(loaded, corpus)


def no_corpus_metric(model: str) -> TaskError:
    """The refusal of a model that has no corpus metric (an extractive-QA model: `model.corpus_estimator`)."""
    return TaskError(
        f"--task {CORPUS_TASK} has no metric for {model}: its head answers questions about a given context, "
        "which corpus windows are not.",
        hint=f"Score it on what it was trained for: --task {SQUAD_TASK}.",
    )


def estimator_of(loaded: LoadedModel, stack: LayerStack) -> CorpusEstimator:
    """The corpus metric of this model and stack (`model.corpus_estimator`); refused if it has none."""
    found = corpus_estimator(loaded.model.config, loaded.kind, tower_of(stack).role)
    if found is None:
        raise no_corpus_metric(loaded.spec.model)
    return found


def corpus_estimator_for(model: ModelSpec, config: PretrainedConfig, loaded: LoadedModel | None) -> CorpusEstimator:
    """The corpus metric of a run: from the loaded model when it is given (an in-memory one), else before loading."""
    if loaded is not None:
        return estimator_of(loaded, find_layers(loaded.model, model.layers_path))
    return estimator_before_loading(model, config)


def estimator_before_loading(model: ModelSpec, config: PretrainedConfig) -> CorpusEstimator:
    """The corpus metric `estimator_of` will give, decided on the config and the weightless skeleton.

    A causal LM or encoder-decoder measured on its default stack reads text: no skeleton is built for it.
    """
    kind = model_kind(config)
    role = TEXT
    if kind == EXTRACTIVE_QA:
        raise no_corpus_metric(model.model)
    if kind not in (CAUSAL_LM, SEQ2SEQ) or model.layers_path:
        role = skeleton_tower(model)[2].role
    found = corpus_estimator(config, kind, role)
    if found is None:
        raise no_corpus_metric(model.model)
    return found


def corpus_metric_record(estimator: CorpusEstimator, seed: int) -> dict[str, object]:
    """What a result records of the corpus metric: the estimator, why, the rule, and a masked LM's masking."""
    masked = estimator.name == MASKED_TOKEN
    return {
        "estimator": estimator.name,
        "reason": estimator.reason,
        "rule": CORPUS_RULE,
        "metrics": list(estimator.metrics),
        "mask_fraction": MASK_FRACTION if masked else None,
        "mask_seed": seed if masked else None,
    }


def corpus_metric_line(estimator: CorpusEstimator) -> str:
    """The one terminal line that says which corpus metric is used and why."""
    return f"corpus metric: {estimator.name} ({estimator.reason}; {', '.join(estimator.metrics)})"


class CorpusScorer:
    """Scores the `corpus` task for the baseline and every given variant, all computed on first use.

    `variants` are sets of removed blocks, sorted (a block index l means (l,), or [l, l+n) with a
    `remover` of span n; with a sublayer `remover`, block l's sublayer; a span of consecutive blocks is one
    such set). The first `score` runs the whole corpus once for every variant (shared prefixes: a variant
    replays the recorded input of its first removed block and runs only the kept blocks after it), later
    calls read the per-window values back, like the shared-prefix lm-eval engine's store. With `ablate`,
    variants are any keys and `ablate(key)` applies one in memory (e.g. zeroed sublayers); each then runs
    the whole model (the simple engine). What is compared is the model's estimator (`estimator_of`);
    `seed` fixes a masked LM's masked positions.
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
        windows: Sequence[AnyWindow] | None = None,
        remover: Remover | None = None,
        ablate: Callable[[Hashable], contextlib.AbstractContextManager[object]] | None = None,
        seed: int = DEFAULT_MASK_SEED,
    ) -> None:
        self.loaded, self.stack, self.corpus = loaded, stack, corpus
        self.estimator = estimator_of(loaded, stack)
        self.pass_ = make_pass(self.estimator, loaded, stack, seed)
        # An encoder-decoder's blocks pass more than hidden states (T5: the position bias of block 0), which
        # a replayed block could not: its variants run the whole model without their blocks.
        simple = engine == "simple" or ablate is not None or loaded.kind == SEQ2SEQ
        self.engine = "simple" if simple else "shared"
        self.ablate = ablate
        self.sublayer = remover if remover is not None and remover.ablation.is_sublayer else None
        self.span_length = remover.ablation.span if remover is not None and self.sublayer is None else 1
        self.variants = list(dict.fromkeys(self.span_of(v) for v in variants if self.span_of(v)))
        for span in self.variants if ablate is None else []:
            if list(span) != sorted(set(span)) or span[-1] >= stack.num_layers or span[0] < 0:
                raise ValueError(f"not a sorted set of distinct blocks of a {stack.num_layers}-block model: {span}")
        self.batch_size = max(1, int(batch_size)) if batch_size != "auto" else 8
        self.windows = windows if windows is not None else self.pass_.windows(corpus)
        self.active: Span = ()
        self.values: dict[Span, dict[str, list[float]]] | None = None

    @property
    def metrics(self) -> tuple[str, ...]:
        """The metrics this scorer reports (its estimator's)."""
        return self.estimator.metrics

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
        return _evaluation(self.values[self.active], self.engine, self.estimator)

    # the work --------------------------------------------------------------------------------------
    @torch.inference_mode()
    def _compute(self) -> dict[Span, dict[str, list[float]]]:
        values: dict[Span, dict[str, list[float]]] = {s: {} for s in [()] + self.variants}
        starts = sorted({span[0] for span in self.variants}) if self.sublayer is None and self.ablate is None else []
        first = 0
        for group in batches(self.windows, self.batch_size):
            batch = self.pass_.batch(group, first)
            first += len(group)
            with capture_block_states(self.stack, image_only_blocks(self.stack)) as states:
                base = self.pass_.forward(batch)
            recorded = {l: states[l] for l in starts} if self.engine == "shared" and self.ablate is None else {}
            del states
            _append(values[()], self.pass_.compare(base, base, batch))
            for span in self.variants:
                final = self._variant_output(span, batch, recorded.get(span[0]))
                _append(values[span], self.pass_.compare(base, final, batch))
        return values

    def _variant_output(self, span: Span, batch: Batch, x_start: torch.Tensor | None) -> torch.Tensor:
        forward = self.pass_.forward
        if self.sublayer is not None:  # block span[0] stays, its sublayer's output is zero: a full pass
            with self.sublayer.variant(span[0]):
                return forward(batch)
        if self.ablate is not None:
            with self.ablate(span):
                return forward(batch)
        if x_start is None:  # the simple engine: the whole model without the blocks
            with removed_blocks(self.stack, list(span)):
                return forward(batch)

        if not hasattr(self, "_arity"):
            self._arity = output_arity(self.stack, torch.zeros(1, 2, dtype=torch.long), lambda _ids: self._probe(batch))
        first = span[0]
        # Keep block `first` as the new first block, standing in for it a replay of x^first: the next
        # kept block (first+n for a span) thus receives x^first, exactly as with the blocks deleted.
        with removed_blocks(self.stack, [*range(first), *span[1:]]) as shrunk:
            block = shrunk.blocks[0]
            shrunk.blocks[0] = Replay(x_start, self._arity, like=block)
            try:
                return forward(batch)
            finally:
                shrunk.blocks[0] = block

    def _probe(self, batch: Batch) -> torch.Tensor:
        """A forward pass just long enough to see how a block returns its states: two tokens of one window.

        A batch of token ids alone is cut to that; a masked or image batch (whose pass reads more than the
        ids) is probed whole.
        """
        if batch.extra or list(batch.inputs) != ["input_ids"]:
            return self.pass_.forward(batch)
        return self.pass_.forward(Batch({"input_ids": batch.inputs["input_ids"][:1, :2]}, rows=1))


def _append(into: dict[str, list[float]], found: dict[str, list[float]]) -> None:
    for key, values in found.items():
        into.setdefault(key, []).extend(values)


def _mean_and_stderr(values: list[float]) -> tuple[float, float | None]:
    n = len(values)
    mean = math.fsum(values) / n
    if n < 2:
        return mean, None
    var = math.fsum((v - mean) ** 2 for v in values) / (n - 1)
    return mean, math.sqrt(var / n)


def _evaluation(values: dict[str, list[float]], engine: str, estimator: CorpusEstimator) -> Evaluation:
    """The typed Evaluation: window means with stderrs, and per-window values for the paired ΔP."""
    n = len(next(iter(values.values())))
    metrics: dict[str, MetricScore] = {}
    per_sample: dict[str, MetricSamples] = {}
    for name in estimator.metrics:
        if name == "perplexity":
            continue
        key = _KEYS[name]
        value, stderr = _mean_and_stderr(values[key])
        metrics[name] = MetricScore(value, stderr, _HIGHER_IS_BETTER[name], n)
        per_sample[name] = MetricSamples(MEAN, {CORPUS_TASK: dict(enumerate(values[key]))})
    if "perplexity" in estimator.metrics:
        nll = metrics["nll"]
        ppl = math.exp(nll.value)  # delta method: d exp(x) = exp(x) dx
        metrics["perplexity"] = MetricScore(ppl, None if nll.stderr is None else ppl * nll.stderr, False, n)
        # lm-eval's `perplexity` aggregation is exp(−mean(items)) over log-likelihoods.
        per_sample["perplexity"] = MetricSamples(
            "perplexity", {CORPUS_TASK: dict(enumerate(-v for v in values["nll"]))}
        )
    ordered = {m: metrics[m] for m in estimator.metrics}
    return Evaluation(
        ordered, num_fewshot=0, samples=n, engine=engine, per_sample={m: per_sample[m] for m in estimator.metrics}
    )
