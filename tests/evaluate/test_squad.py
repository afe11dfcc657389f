"""SQuAD v1.1 scoring: metrics by hand, span search against brute force, and a tiny QA model."""

from __future__ import annotations

import math
import random
import statistics

import pytest
import torch
from factories import SQUAD_EXAMPLES

from layerprobe.core.errors import TaskError
from layerprobe.data.squad import SquadExample, load_squad
from layerprobe.evaluate.squad import (
    METRICS,
    SquadScorer,
    best_span,
    exact_match_score,
    f1_score,
    normalize_answer,
    score_predictions,
)


@pytest.fixture(scope="module")
def qa_model(tiny_checkpoints):
    import transformers as tf

    path = tiny_checkpoints["bert_qa"]
    model = tf.AutoModelForQuestionAnswering.from_pretrained(path).eval()
    return model, tf.AutoTokenizer.from_pretrained(path)


# ----------------------------------------------------------------------------------------------- metrics
def test_normalize_answer_follows_the_official_rules():
    assert normalize_answer("  The Quick,  brown FOX! ") == "quick brown fox"
    assert normalize_answer("Theory of an anagram") == "theory of anagram"  # whole-word articles only
    assert normalize_answer("a banana") == "banana"
    assert normalize_answer("U.S.A. don't") == "usa dont"  # punctuation is deleted, not split on


def test_exact_match_by_hand():
    assert exact_match_score("the Broncos!", ["Denver Broncos", "Broncos"]) == 1.0
    assert exact_match_score("Denver", ["Denver Broncos"]) == 0.0
    assert exact_match_score("The", ["a"]) == 1.0  # both normalise to ""
    assert exact_match_score("", ["x"]) == 0.0
    assert exact_match_score("Paris", "paris.") == 1.0  # a bare string is one gold answer


def test_f1_by_hand():
    # pred [denver, broncos, team], gold [denver, broncos]: shared 2, P = 2/3, R = 1, F1 = (4/3)/(5/3) = 0.8
    assert f1_score("Denver Broncos team", ["the Denver Broncos"]) == pytest.approx(0.8)
    # pred [in, year, 1889, in, paris] (5), gold [paris, in, 1889] (3): shared = in 1 + 1889 1 + paris 1 = 3
    # P = 3/5, R = 1, F1 = 2 * 0.6 / 1.6 = 0.75
    assert f1_score("in the year 1889 in Paris", ["Paris in 1889"]) == pytest.approx(0.75)
    # best of several golds: [chrysler] vs [chrysler, building] gives P = 1, R = 1/2, F1 = 2/3
    assert f1_score("Chrysler", ["Empire State", "the Chrysler Building"]) == pytest.approx(2 / 3)
    # repeated tokens count once each: [cat, cat, cat] vs [cat]: P = 1/3, R = 1, F1 = 0.5
    assert f1_score("the cat cat, cat", ["cat"]) == pytest.approx(0.5)
    assert f1_score("", ["x"]) == 0.0
    assert f1_score("", [""]) == 0.0  # v1.1 gives 0 when nothing is shared, even two empty answers
    assert f1_score("Paris!", ["paris"]) == 1.0
    with pytest.raises(ValueError):
        f1_score("x", [])


def test_score_predictions_means_and_stderr():
    examples = [SquadExample("a", "q", "c", ("Denver Broncos",)), SquadExample("b", "q", "c", ("cat",))]
    scores = score_predictions(examples, {"a": "Denver Broncos", "b": "dog"})
    assert list(scores) == list(METRICS)
    # per example EM = [100, 0]: mean 50, sample std = sqrt(2 * 50^2 / 1) = 70.71,
    # stderr = 70.71 / sqrt(2) = 50
    assert scores["exact_match"].value == pytest.approx(50.0)
    assert scores["exact_match"].stderr == pytest.approx(50.0)
    assert scores["f1"].samples == 2 and scores["f1"].higher_is_better
    single = score_predictions(examples[:1], {})  # a missing prediction scores as ""
    assert single["f1"].value == 0.0 and single["f1"].stderr is None


# ---------------------------------------------------------------------------------------------- best_span
def _brute_force(start, end, context, attention, max_len, n_best):
    """Every (s, e) pair, O(n^2), restricted to the top-n real positions as the HF post-processing does."""
    real = [i for i in range(len(start)) if attention[i]]
    top_start = set(sorted(real, key=lambda i: -start[i])[:n_best])
    top_end = set(sorted(real, key=lambda i: -end[i])[:n_best])
    best = (-1, -1, -math.inf)
    for s in range(len(start)):
        for e in range(len(end)):
            if (
                s in top_start
                and e in top_end
                and context[s]
                and context[e]
                and s <= e < s + max_len
                and start[s] + end[e] > best[2]
            ):
                best = (s, e, start[s] + end[e])
    return best


@pytest.mark.parametrize("seed", range(300))
def test_best_span_matches_brute_force(seed):
    rng = random.Random(seed)
    length = rng.randint(1, 40)
    start, end = torch.randn(2, length, generator=torch.Generator().manual_seed(seed))
    context = [rng.random() < 0.7 for _ in range(length)]
    real = rng.randint(1, length)
    attention = [i < real for i in range(length)]  # right padding after `real` tokens
    max_len, n_best = rng.randint(1, 12), rng.choice([1, 3, 20, length, length + 5])
    got = best_span(start, end, torch.tensor(context), max_len, n_best, torch.tensor(attention))
    want = _brute_force(start.tolist(), end.tolist(), context, attention, max_len, n_best)
    assert (int(got[0]), int(got[1])) == want[:2]
    assert float(got[2]) == (pytest.approx(want[2]) if want[0] >= 0 else -math.inf)


def test_best_span_batched_equals_row_by_row():
    generator = torch.Generator().manual_seed(0)
    start, end = torch.randn(2, 8, 30, generator=generator)
    context = torch.rand(8, 30, generator=generator) > 0.3
    first, last, score = best_span(start, end, context, 7, 5)
    for row in range(8):
        one = best_span(start[row], end[row], context[row], 7, 5)
        assert [int(one[0]), int(one[1]), float(one[2])] == [int(first[row]), int(last[row]), float(score[row])]


def test_best_span_without_a_valid_span():
    logits = torch.tensor([5.0, 4.0, 0.0, 0.0])
    # the top-2 starts and ends are the question tokens 0 and 1: nothing valid in the context (2, 3)
    first, last, score = best_span(logits, logits, torch.tensor([False, False, True, True]), 30, 2)
    assert (int(first), int(last), float(score)) == (-1, -1, -math.inf)
    nan_start = torch.tensor([float("nan"), 1.0])
    first, _, score = best_span(nan_start, torch.ones(2), torch.ones(2, dtype=torch.bool))
    assert int(first) == -1 and float(score) == -math.inf  # NaN never wins


# ------------------------------------------------------------------------------------------------- scorer
def test_tiny_qa_model_scores_consistently(qa_model, squad_json):
    model, tokenizer = qa_model
    examples = load_squad(squad_json)
    scorer = SquadScorer(model, tokenizer, examples, max_length=64, doc_stride=16, batch_size=4)
    assert scorer.num_windows >= len(examples) + 3  # the long paragraph overflows into several windows
    advanced = []
    scores = scorer(progress=advanced.append)
    assert sum(advanced) == scorer.num_windows and len(advanced) == math.ceil(scorer.num_windows / 4)
    assert list(scores.metrics) == ["f1", "exact_match"] and scores.nonfinite_windows == 0
    assert set(scores.predictions) == {e.id for e in examples}
    for example in examples:
        assert scores.predictions[example.id] in example.context  # a span of its own context
    for name, metric in (("f1", f1_score), ("exact_match", exact_match_score)):
        per = [100 * metric(scores.predictions[e.id], e.answers) for e in examples]
        assert scores.metrics[name].value == pytest.approx(statistics.fmean(per))
        assert scores.metrics[name].stderr == pytest.approx(statistics.stdev(per) / math.sqrt(len(per)))
        assert scores.metrics[name].samples == len(examples)
    assert scorer() == scores  # same model, same tokenization: identical results


def test_scorer_is_reused_after_a_block_is_removed(qa_model, squad_json):
    model, tokenizer = qa_model
    examples = load_squad(squad_json)
    scorer = SquadScorer(model, tokenizer, examples, max_length=64, doc_stride=16)
    blocks = model.bert.encoder.layer
    model.bert.encoder.layer = torch.nn.ModuleList(list(blocks)[:1] + list(blocks)[2:])  # skip block 1
    try:
        pruned = scorer()
        fresh = SquadScorer(model, tokenizer, examples, max_length=64, doc_stride=16)()
    finally:
        model.bert.encoder.layer = blocks
    assert pruned == fresh  # nothing stale was cached between calls
    assert all(pruned.predictions[e.id] in e.context for e in examples)


class _PerfectQA(torch.nn.Module):
    """The tiny model with its span logits replaced by peaks at the gold answer's first/last tokens."""

    def __init__(self, inner, gold_tokens):
        super().__init__()
        self.inner, self.gold_tokens = inner, gold_tokens

    def forward(self, input_ids, attention_mask, token_type_ids=None):
        from transformers.modeling_outputs import QuestionAnsweringModelOutput

        out = self.inner(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
        start, end = torch.zeros_like(out.start_logits), torch.zeros_like(out.end_logits)
        for row in range(len(input_ids)):
            key = tuple(input_ids[row][attention_mask[row] == 1].tolist())
            if key in self.gold_tokens:
                first, last = self.gold_tokens[key]
                start[row, first] = end[row, last] = 10.0
        return QuestionAnsweringModelOutput(start_logits=start, end_logits=end)


def test_perfect_model_scores_100(qa_model, squad_json):
    model, tokenizer = qa_model
    examples = load_squad(squad_json)
    gold_tokens = {}  # window input_ids -> (first, last) token of the first gold answer, from offsets
    for example in examples:
        answer = example.answers[0]
        begin = example.context.index(answer)
        enc = tokenizer(
            example.question,
            example.context,
            truncation="only_second",
            max_length=64,
            stride=16,
            return_overflowing_tokens=True,
            return_offsets_mapping=True,
        )
        found = 0
        for w, offsets in enumerate(enc["offset_mapping"]):
            in_context = [i for i, s in enumerate(enc.sequence_ids(w)) if s == 1]
            first = [i for i in in_context if offsets[i][0] == begin]
            last = [i for i in in_context if offsets[i][1] == begin + len(answer)]
            if first and last:
                gold_tokens[tuple(enc["input_ids"][w])] = (first[0], last[0])
                found += 1
        assert found >= 1, example.id
    perfect = _PerfectQA(model, gold_tokens)
    scores = SquadScorer(perfect, tokenizer, examples, max_length=64, doc_stride=16, batch_size=3)()
    assert scores.predictions == {e.id: e.answers[0] for e in examples}
    assert scores.metrics["exact_match"].value == 100.0 and scores.metrics["f1"].value == 100.0
    assert scores.metrics["f1"].stderr == 0.0


def test_model_without_a_qa_head_is_refused(minilm, squad_json):
    import transformers as tf

    model, tokenizer = tf.AutoModel.from_pretrained(minilm), tf.AutoTokenizer.from_pretrained(minilm)
    with pytest.raises(TaskError, match="is not an extractive-QA model") as info:
        SquadScorer(model, tokenizer, load_squad(squad_json, limit=2), max_length=64, doc_stride=16)
    assert "ForQuestionAnswering" in info.value.hint


def test_scorer_refuses_bad_settings(qa_model):
    model, tokenizer = qa_model
    examples = SQUAD_EXAMPLES[:2]
    with pytest.raises(TaskError, match="doc_stride"):
        SquadScorer(model, tokenizer, examples, max_length=64, doc_stride=64)
    with pytest.raises(TaskError, match="fast tokenizer"):
        SquadScorer(model, object(), examples)
    with pytest.raises(TaskError, match="repeated"):
        SquadScorer(model, tokenizer, [SQUAD_EXAMPLES[0], SQUAD_EXAMPLES[0]])
    with pytest.raises(TaskError, match="positions"):
        SquadScorer(model, tokenizer, examples, max_length=1024)
    long_question = SquadExample("x", "why " * 80, "short context", ("short",))
    with pytest.raises(TaskError, match="windows"):
        SquadScorer(model, tokenizer, [long_question], max_length=64, doc_stride=16)
