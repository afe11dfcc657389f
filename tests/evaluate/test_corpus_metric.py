"""`--task corpus` (NLL, KL(base ‖ variant), top-1 agreement) vs a float64 computation on physically pruned models."""

from __future__ import annotations

import math

import pytest
import torch
import transformers as tf
from reference import corpus_reference, deleted_span_float64

from layerprobe.core import BUILTIN_CORPUS, CorpusSpec, ModelSpec
from layerprobe.data import build_windows, iter_documents
from layerprobe.evaluate.corpus_metric import CorpusScorer, corpus_windows
from layerprobe.model.ablation import Remover
from layerprobe.model.load import load_model
from layerprobe.model.stack import find_layers

CORPUS = CorpusSpec(BUILTIN_CORPUS, tokens=72, seq_len=16)  # 4 full windows and one of 8


@pytest.mark.parametrize(
    ("arch", "engine"),
    [
        ("llama", "shared"),
        ("llama", "simple"),
        pytest.param("gpt2", "shared", marks=pytest.mark.slow),
        pytest.param("gpt2", "simple", marks=pytest.mark.slow),
    ],
)
def test_corpus_scores_match_float64_physically_pruned(tiny_checkpoints, tmp_path, arch, engine):
    path = tiny_checkpoints[arch]
    loaded = load_model(ModelSpec(str(path), dtype="float32", device="cpu"), purpose="head")
    stack = find_layers(loaded.model)
    spans = [(1,), (1, 2), (2, 3), (0, 2)]  # (0, 2): a set of blocks that is not a span
    scorer = CorpusScorer(loaded, stack, CORPUS, [None, *spans], batch_size=2, engine=engine)
    assert len(scorer.windows) == 5 and len(scorer.windows[-1].input_ids) == 8
    base64 = tf.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float64).eval()
    for span in [(), *spans]:
        with scorer.variant(span or None):
            evaluation = scorer.score("corpus")
        variant64 = deleted_span_float64(path, arch, span, tmp_path / "_".join(map(str, span))) if span else base64
        ref = corpus_reference(base64, variant64, scorer.windows)
        for name, key in (("nll", "nll"), ("kl", "kl"), ("top1_agreement", "top1")):
            got = evaluation.per_sample[name].values["corpus"]
            assert [got[i] for i in range(5)] == pytest.approx(ref[key], abs=2e-5), (span, name)
            mean = sum(ref[key]) / 5
            assert evaluation.metrics[name].value == pytest.approx(mean, abs=2e-5)
            sd = math.sqrt(sum((v - mean) ** 2 for v in ref[key]) / 4 / 5)
            assert evaluation.metrics[name].stderr == pytest.approx(sd, abs=2e-5)
        nll = sum(ref["nll"]) / 5
        assert evaluation.metrics["perplexity"].value == pytest.approx(math.exp(nll), rel=1e-4)
        if not span:  # the baseline against itself: nothing lost, everything agrees
            assert evaluation.metrics["kl"].value == pytest.approx(0, abs=1e-6)
            assert evaluation.metrics["top1_agreement"].value == 1.0
        else:
            assert evaluation.metrics["kl"].value > 1e-4


def test_corpus_windows_are_angulars(tiny_checkpoints):
    """The scorer reads exactly the windows `angular` builds for the same corpus options."""
    loaded = load_model(ModelSpec(str(tiny_checkpoints["llama"]), device="cpu"), purpose="head")
    expected = build_windows(loaded.tokenizer, iter_documents(CORPUS), CORPUS.tokens, CORPUS.seq_len)
    assert corpus_windows(loaded, CORPUS) == expected


def test_corpus_scorer_rejects_what_is_not_a_sorted_set_of_blocks(tiny_checkpoints):
    loaded = load_model(ModelSpec(str(tiny_checkpoints["llama"]), device="cpu"), purpose="head")
    for bad in [(2, 0)], [(1, 1)], [(3, 4)], [(-1, 0)]:
        with pytest.raises(ValueError):
            CorpusScorer(loaded, find_layers(loaded.model), CORPUS, bad, windows=[])


def test_corpus_scores_spans_and_sublayers_of_a_remover(tiny_checkpoints, tmp_path):
    """prune-drop's --span n and --unit attention on --task corpus: variant l is [l, l+n), or block l's attention."""
    path = tiny_checkpoints["llama"]
    loaded = load_model(ModelSpec(str(path), dtype="float32", device="cpu"), purpose="head")
    stack = find_layers(loaded.model)
    base64 = tf.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float64).eval()
    spans = Remover.for_model(loaded.model, stack, "block", 2)
    scorer = CorpusScorer(loaded, stack, CORPUS, [None, 0, 2], batch_size=2, engine="shared", remover=spans)
    assert scorer.variants == [(0, 1), (2, 3)]
    with scorer.variant(2):
        got = scorer.score("corpus").per_sample["kl"].values["corpus"]
    ref = corpus_reference(base64, deleted_span_float64(path, "llama", (2, 3), tmp_path / "span"), scorer.windows)
    assert [got[i] for i in range(5)] == pytest.approx(ref["kl"], abs=2e-5)

    attention = Remover.for_model(loaded.model, stack, "attention")
    scorer = CorpusScorer(loaded, stack, CORPUS, [None, 1], batch_size=2, engine="shared", remover=attention)
    with scorer.variant(1):
        evaluation = scorer.score("corpus")
    zeroed = tf.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float64).eval()
    with torch.no_grad():  # the reference: block 1's attention output projection set to zero
        zeroed.model.layers[1].self_attn.o_proj.weight.zero_()
    ref = corpus_reference(base64, zeroed, scorer.windows)
    for name, key in (("nll", "nll"), ("kl", "kl"), ("top1_agreement", "top1")):
        got = evaluation.per_sample[name].values["corpus"]
        assert [got[i] for i in range(5)] == pytest.approx(ref[key], abs=2e-5), name
    assert evaluation.metrics["kl"].value > 1e-4
    with scorer.variant(None):
        assert scorer.score("corpus").metrics["kl"].value == pytest.approx(0, abs=1e-6)
