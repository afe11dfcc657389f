"""SQuAD v1.1 exact match and F1 for extractive-QA models.

lm-evaluation-harness scores a model by generating or ranking text, which an encoder with a span head
cannot do, so layerprobe scores SQuAD itself. The prune command scores the same model object once as a
baseline and again after each block is removed in memory, so `SquadScorer` tokenizes everything once,
in its constructor, and each call only runs the model and reads off spans.

Metrics follow the official SQuAD v1.1 evaluation script: answers are normalised (lowercase, punctuation
and the articles a/an/the removed, whitespace collapsed); exact match and token-overlap F1 take the best
gold answer; totals are means on a 0-100 scale. Spans are picked as the Hugging Face QA post-processing
picks them: top `n_best` start and end logits per window, best valid pair by summed logit, best window.
Reading the questions (`load_squad`, `SquadExample`) is the data room's (`layerprobe.data`).
"""

from __future__ import annotations

import math
import re
import statistics
import string
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import torch

from layerprobe.core import TaskError
from layerprobe.data import SquadExample, load_squad
from layerprobe.evaluate.paired import MEAN
from layerprobe.model import Remover, context_length
from layerprobe.results import Evaluation, MetricSamples, MetricScore

METRICS = ("f1", "exact_match")
SQUAD_SAMPLES_TASK = "squad"  # the task name per-question values are kept under
NOT_QA_HINT = (
    "SQuAD needs a checkpoint fine-tuned for question answering (…ForQuestionAnswering), "
    "e.g. csarron/bert-base-uncased-squad-v1"
)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = frozenset(string.punctuation)

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from layerprobe.core import PruneSpec
    from layerprobe.model import LayerStack, LoadedModel, Progress


@dataclass(frozen=True)
class SquadScores:
    """Metrics in the order f1, exact_match; the predicted answer text per question id, for debugging.

    `per_sample` holds each metric's per-question values (0-100, keyed by question id, under the task
    name "squad"), which pair a pruned variant with the baseline question by question.
    """

    metrics: dict[str, MetricScore]
    predictions: dict[str, str]
    nonfinite_windows: int = 0  # windows whose real tokens got a NaN/inf logit: counted, never hidden
    per_sample: dict[str, MetricSamples] = field(default_factory=dict)


# --------------------------------------------------------------------------------------------- metrics
def normalize_answer(text: str) -> str:
    """The official v1.1 normalisation, so that 'The Broncos.' and 'broncos' count as the same answer."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match_score(prediction: str, golds: str | Iterable[str]) -> float:
    """1.0 if the normalised prediction equals any normalised gold answer, else 0.0."""
    return max(float(normalize_answer(prediction) == normalize_answer(gold)) for gold in _golds(golds))


def f1_score(prediction: str, golds: str | Iterable[str]) -> float:
    """Best token-overlap F1 (0-1) against any gold answer; no shared token (or an empty side) gives 0."""
    predicted = normalize_answer(prediction).split()
    return max(_token_f1(predicted, normalize_answer(gold).split()) for gold in _golds(golds))


def _golds(golds: str | Iterable[str]) -> tuple[str, ...]:
    golds = (golds,) if isinstance(golds, str) else tuple(golds)  # a bare string is one answer, not chars
    if not golds:
        raise ValueError("SQuAD metrics need at least one gold answer")
    return golds


def _token_f1(predicted: list[str], gold: list[str]) -> float:
    shared = sum((Counter(predicted) & Counter(gold)).values())  # multiset intersection
    if shared == 0:
        return 0.0
    precision, recall = shared / len(predicted), shared / len(gold)
    return 2 * precision * recall / (precision + recall)


def per_question_scores(examples: list[SquadExample], predictions: dict[str, str]) -> dict[str, dict[str, float]]:
    """F1 and exact match (0-100) of every question, by metric and question id (a missing answer is "")."""
    return {
        name: {e.id: 100.0 * metric(predictions.get(e.id, ""), e.answers) for e in examples}
        for name, metric in (("f1", f1_score), ("exact_match", exact_match_score))
    }


def score_predictions(examples: list[SquadExample], predictions: dict[str, str]) -> dict[str, MetricScore]:
    """Mean F1 and exact match over `examples` (0-100), with stderr = sample std (ddof=1) / sqrt(n)."""
    out = {}
    for name, by_id in per_question_scores(examples, predictions).items():
        per_example = list(by_id.values())
        n = len(per_example)
        stderr = statistics.stdev(per_example) / math.sqrt(n) if n > 1 else None
        out[name] = MetricScore(statistics.fmean(per_example), stderr, higher_is_better=True, samples=n)
    return out


# ----------------------------------------------------------------------------------------- span search
def best_span(
    start_logits: torch.Tensor,
    end_logits: torch.Tensor,
    context_mask: torch.Tensor,
    max_answer_length: int = 30,
    n_best: int = 20,
    attention_mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The best answer span of each window, as the Hugging Face QA post-processing picks it.

    Candidates are the `n_best` highest start and end logits over the whole window (question tokens
    included, as in Hugging Face); a pair is valid when both tokens lie in the context, start <= end and
    end - start + 1 <= max_answer_length. Padding (attention_mask == 0) is never a candidate, so the
    answer does not depend on how windows were batched.

    Args:
        start_logits: (..., seq) span-start logits.
        end_logits: (..., seq) span-end logits.
        context_mask: (..., seq) bool, True on the context's tokens.
        max_answer_length: Longest answer, in tokens.
        n_best: How many top start and top end positions to pair up.
        attention_mask: (..., seq) optional, 0 on padding.

    Returns:
        (start, end, score), each (...): token indices of the best span and its start + end logit;
        -1, -1, -inf where no valid span exists (or its score is NaN).
    """
    start, end = start_logits.float(), end_logits.float()
    if attention_mask is not None:
        start = start.masked_fill(attention_mask == 0, -math.inf)
        end = end.masked_fill(attention_mask == 0, -math.inf)
    k = min(n_best, start.shape[-1])
    (start_val, start_idx), (end_val, end_idx) = start.topk(k, dim=-1), end.topk(k, dim=-1)
    context = context_mask.bool()
    length = end_idx.unsqueeze(-2) - start_idx.unsqueeze(-1) + 1  # (..., k starts, k ends)
    valid = (
        (length >= 1)
        & (length <= max_answer_length)
        & context.gather(-1, start_idx).unsqueeze(-1)
        & context.gather(-1, end_idx).unsqueeze(-2)
    )
    pair = (start_val.unsqueeze(-1) + end_val.unsqueeze(-2)).masked_fill(~valid, -math.inf).flatten(-2)
    score, flat = pair.max(dim=-1)
    found = score > -math.inf  # False for -inf and NaN
    first = start_idx.gather(-1, (flat // k).unsqueeze(-1)).squeeze(-1)
    last = end_idx.gather(-1, (flat % k).unsqueeze(-1)).squeeze(-1)
    return (first.masked_fill(~found, -1), last.masked_fill(~found, -1), score.masked_fill(~found, -math.inf))


# ------------------------------------------------------------------------------------------------ scorer
@dataclass(frozen=True)
class _Batch:
    example: torch.Tensor  # (batch,) index into the examples
    inputs: dict[str, torch.Tensor]  # (batch, width) each, right-padded
    context: torch.Tensor  # (batch, width) bool
    offsets: torch.Tensor  # (batch, width, 2) character span of each token in its context


class SquadScorer:
    """Scores one extractive-QA model on fixed SQuAD questions, as many times as it is changed in memory.

    The constructor tokenizes every question+context pair once (long contexts become overlapping windows
    of `max_length` tokens, `doc_stride` tokens shared between neighbours) into length-sorted,
    right-padded batches; each call is then one forward pass over the windows plus the span search.
    """

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        examples: list[SquadExample],
        *,
        max_length: int = 384,
        doc_stride: int = 128,
        max_answer_length: int = 30,
        n_best: int = 20,
        batch_size: int = 32,
    ) -> None:
        """Tokenize once and check, with one window, that the model has a span (QA) head."""
        if not 0 <= doc_stride < max_length or min(max_answer_length, n_best, batch_size) < 1:
            raise TaskError(
                f"Bad SQuAD settings: {max_length=}, {doc_stride=}, {max_answer_length=}, {n_best=}, {batch_size=}",
                hint="need 0 <= doc_stride < max_length, rest >= 1",
            )
        if not getattr(tokenizer, "is_fast", False):
            raise TaskError(
                f"SQuAD scoring needs a fast tokenizer, got {type(tokenizer).__name__}",
                hint="answers are mapped back to characters through offset mappings",
            )
        repeated = [k for k, count in Counter(e.id for e in examples).items() if count > 1]
        if not examples or repeated:
            raise TaskError(f"SQuAD needs questions with unique ids; got {len(examples)}, repeated: {repeated[:5]}")
        limit = context_length(getattr(model, "config", None), tokenizer)
        if limit is not None and max_length > limit:
            raise TaskError(f"max_length {max_length} exceeds the model's {limit} positions")
        self.model, self.examples = model, list(examples)
        self.max_answer_length, self.n_best = max_answer_length, n_best
        self._batches = self._tokenize(tokenizer, max_length, doc_stride, batch_size)
        self._qa_logits({k: v[:1] for k, v in self._batches[-1].inputs.items()}, _device(model))

    @property
    def num_windows(self) -> int:
        """How many windows each call runs through the model: the total for `progress`."""
        return sum(len(batch.example) for batch in self._batches)

    def _tokenize(
        self, tokenizer: PreTrainedTokenizerBase, max_length: int, stride: int, batch_size: int
    ) -> list[_Batch]:
        try:
            enc = tokenizer(
                [e.question.lstrip() for e in self.examples],
                [e.context for e in self.examples],
                truncation="only_second",
                max_length=max_length,
                stride=stride,
                return_overflowing_tokens=True,
                return_offsets_mapping=True,
            )
        except Exception as exc:  # the Rust tokenizers raise bare Exceptions for impossible windows
            raise TaskError(
                f"Cannot split the SQuAD contexts into {max_length}-token windows: {exc}",
                hint="raise max_length or lower doc_stride (a question may not fit)",
            ) from exc
        names = ["input_ids", "attention_mask"] + [
            n for n in ("token_type_ids",) if n in enc and n in tokenizer.model_input_names
        ]
        pads = {"input_ids": tokenizer.pad_token_id or 0}
        lengths = [len(ids) for ids in enc["input_ids"]]
        order = sorted(range(len(lengths)), key=lambda w: -lengths[w])  # longest first: OOM shows up early
        return [
            _Batch(
                example=torch.tensor([enc["overflow_to_sample_mapping"][w] for w in rows]),
                inputs={n: _padded([enc[n][w] for w in rows], pads.get(n, 0)) for n in names},
                context=_padded([[s == 1 for s in enc.sequence_ids(w)] for w in rows]).bool(),
                offsets=_padded([enc["offset_mapping"][w] for w in rows]).int(),
            )
            for rows in (order[i : i + batch_size] for i in range(0, len(order), batch_size))
        ]

    def _qa_logits(self, inputs: dict[str, torch.Tensor], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """The model's span-start and span-end logits for one batch; TaskError if it has no QA head."""
        with torch.no_grad():
            output = self.model(**{k: v.to(device) for k, v in inputs.items()})
        start, end = (getattr(output, name, None) for name in ("start_logits", "end_logits"))
        if not (isinstance(start, torch.Tensor) and isinstance(end, torch.Tensor)):
            name = getattr(getattr(self.model, "config", None), "_name_or_path", "") or "the model"
            raise TaskError(
                f"{name} ({type(self.model).__name__}) is not an extractive-QA model: its "
                "forward returns no start_logits/end_logits",
                hint=NOT_QA_HINT,
            )
        return start, end

    def __call__(self, progress: Callable[[int], object] | None = None) -> SquadScores:
        """Run the model over every window (eval mode, no grad) and score its best span per question.

        Args:
            progress: Called after each batch with the number of windows done (total `num_windows`).
        """
        device, was_training = _device(self.model), self.model.training
        best = [(-math.inf, 0, 0)] * len(self.examples)  # (score, first char, end char) per question
        nonfinite = 0
        self.model.eval()  # dropout off; the caller's mode comes back in `finally`
        try:
            for batch in self._batches:
                start, end = (t.float() for t in self._qa_logits(batch.inputs, device))
                real = batch.inputs["attention_mask"].to(device) != 0
                nonfinite += int(((~start.isfinite() | ~end.isfinite()) & real).any(-1).sum())
                first, last, score = best_span(
                    start, end, batch.context.to(device), self.max_answer_length, self.n_best, real
                )
                rows = torch.arange(len(batch.example))
                chars = zip(
                    score.tolist(),
                    batch.offsets[rows, first.cpu().clamp(min=0), 0].tolist(),
                    batch.offsets[rows, last.cpu().clamp(min=0), 1].tolist(),
                    strict=True,
                )
                for i, found in zip(batch.example.tolist(), chars, strict=True):
                    best[i] = max(best[i], found, key=lambda span: span[0])  # ties keep the first seen
                if progress is not None:
                    progress(len(rows))
        finally:
            self.model.train(was_training)
        predictions = {
            e.id: e.context[a:b] if s > -math.inf else "" for e, (s, a, b) in zip(self.examples, best, strict=True)
        }
        per_question = per_question_scores(self.examples, predictions)
        return SquadScores(
            score_predictions(self.examples, predictions),
            predictions,
            nonfinite,
            {name: MetricSamples(MEAN, {SQUAD_SAMPLES_TASK: values}) for name, values in per_question.items()},
        )


def _padded(rows: list[list], fill: int = 0) -> torch.Tensor:
    out = np.full((len(rows), max(len(row) for row in rows), *np.shape(rows[0][0])), fill, dtype=np.int64)
    for i, row in enumerate(rows):  # numpy row copies: ~4x faster than torch.tensor on nested lists
        out[i, : len(row)] = row
    return torch.from_numpy(out)


def _device(model: PreTrainedModel) -> torch.device:
    """Where the model's inputs go: its `device`, else the device of its first parameter."""
    device = getattr(model, "device", None)
    return device if isinstance(device, torch.device) else next(model.parameters()).device


def squad_examples(spec: PruneSpec) -> list[SquadExample]:
    """The questions prune-drop scores: `--squad-data` or the hub's, cut by `--limit` (a fraction rounds up)."""
    if spec.limit is not None and spec.limit < 1:  # a fraction of the questions, rounded up like lm-eval
        examples = load_squad(spec.squad_data)
        return examples[: math.ceil(len(examples) * spec.limit)]
    return load_squad(spec.squad_data, None if spec.limit is None else int(spec.limit))


class SquadTaskScorer:
    """prune-drop's scorer for `--task squad`: questions tokenized once, one pass per variant.

    Advances the evaluation stage of `progress` window by window (a fraction of one evaluation per
    batch), so a SQuAD run shows a moving bar instead of one that jumps once per variant.
    """

    engine = "simple"
    reports_progress = True

    def __init__(
        self,
        loaded: LoadedModel,
        stack: LayerStack,
        spec: PruneSpec,
        progress: Progress,
        remover: Remover | None = None,
        examples: list[SquadExample] | None = None,
    ) -> None:
        self.remover = remover or Remover(stack)
        examples = examples if examples is not None else squad_examples(spec)
        batch = spec.batch_size if isinstance(spec.batch_size, int) else 32
        self.stack, self.progress = stack, progress
        # The usual 384-token windows (stride 128), shortened for a model with fewer positions.
        positions = loaded.context_length
        max_length = min(384, positions) if positions is not None else 384
        self.scorer = SquadScorer(
            loaded.model,
            loaded.tokenizer,
            examples,
            max_length=max_length,
            doc_stride=min(128, max_length // 2),
            batch_size=batch,
        )
        self.last: SquadScores | None = None  # the latest call's predictions, for callers that inspect them

    @contextmanager
    def variant(self, layer: int | None) -> Iterator[None]:
        with self.remover.variant(layer):
            yield

    def score(self, task: str) -> Evaluation:
        windows = self.scorer.num_windows
        self.last = scores = self.scorer(progress=lambda n: self.progress.on_advance(n / windows))
        samples = next(iter(scores.metrics.values())).samples
        return Evaluation(
            scores.metrics, 0, samples, self.engine, nonfinite=scores.nonfinite_windows, per_sample=scores.per_sample
        )
