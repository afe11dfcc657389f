"""`--task corpus` on encoders and towers: masked LMs, image classifiers and headless towers.

Every estimator is checked against an independent float64 computation on a model rebuilt from a smaller
config without the removed blocks (their weights renumbered into it, strictly): the masked-LM loss, KL and
top-1 computed here from the model's own full forward on masked windows; an image classifier's class
logits; a tower's pooled output. Both engines (shared prefixes, simple) must give the same numbers.
"""

from __future__ import annotations

import copy
import math
from types import SimpleNamespace

import pytest
import torch
import transformers as tf
from factories.checkpoints import build_bert_mlm, quiet_logs
from factories.towers import build_tower_checkpoint, write_image_folder
from reference import load_without_block

from layerprobe.core import BUILTIN_CORPUS, CorpusSpec, ModelSpec
from layerprobe.evaluate.corpus_metric import CorpusScorer, estimator_before_loading
from layerprobe.model import (
    CAUSAL_LM,
    CLASS_LOGITS,
    ENCODER,
    EXTRACTIVE_QA,
    IMAGE_CLASSIFIER,
    MASKED_LM,
    MASKED_TOKEN,
    NEXT_TOKEN,
    POOLED_OUTPUT,
    SEQ2SEQ,
    corpus_estimator,
    find_layers,
    load_config,
    load_model,
)

SEED = 1234
TEXT = CorpusSpec(BUILTIN_CORPUS, tokens=96, seq_len=24)  # 4 windows
SPANS = [(1,), (0, 2)]  # one block, and a set of blocks that is not a span


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("estimators")
    with quiet_logs():
        return {
            "bert_mlm": build_bert_mlm(root / "bert_mlm", initializer_range=0.3),
            "vit_classifier": build_tower_checkpoint("vit_classifier", root / "vit_classifier"),
            "clip": build_tower_checkpoint("clip", root / "clip"),
            "images": write_image_folder(root / "images", count=5),
        }


def _config(model_type: str, *architectures: str) -> SimpleNamespace:
    """What the rule reads of a config (its model type and saved classes), without importing config classes."""
    return SimpleNamespace(model_type=model_type, architectures=list(architectures))


def test_one_rule_picks_the_estimator_from_the_shipped_head():
    """The head the checkpoint ships for its measured stack decides; no head: the tower's pooled output."""
    bert, vit = _config("bert", "BertForMaskedLM"), _config("vit", "ViTForImageClassification")
    assert corpus_estimator(bert, ENCODER, "text").name == MASKED_TOKEN
    assert corpus_estimator(bert, ENCODER, "text").purpose == MASKED_LM
    assert corpus_estimator(_config("bert", "BertModel"), ENCODER, "text").name == POOLED_OUTPUT
    assert corpus_estimator(vit, ENCODER, "vision").name == CLASS_LOGITS
    assert corpus_estimator(vit, ENCODER, "vision").purpose == IMAGE_CLASSIFIER
    assert corpus_estimator(_config("vit", "ViTModel"), ENCODER, "vision").name == POOLED_OUTPUT
    assert corpus_estimator(_config("clip", "CLIPModel"), ENCODER, "vision").name == POOLED_OUTPUT
    assert corpus_estimator(_config("clip", "CLIPModel"), ENCODER, "text").purpose == "base"
    llama = _config("llama", "LlamaForCausalLM")
    assert corpus_estimator(llama, CAUSAL_LM, "text").name == NEXT_TOKEN
    assert corpus_estimator(_config("paligemma", "PaliGemmaForConditionalGeneration"), CAUSAL_LM, "vision").name == (
        POOLED_OUTPUT
    )
    assert corpus_estimator(_config("t5", "T5ForConditionalGeneration"), SEQ2SEQ, "text").name == NEXT_TOKEN
    assert corpus_estimator(_config("bert", "BertForQuestionAnswering"), EXTRACTIVE_QA, "text") is None


def _rebuilt_float64(path, auto, blocks, prefix, sub_config=None):
    """The checkpoint in float64, rebuilt from its config with `blocks` fewer blocks and its weights renumbered."""
    model = auto.from_pretrained(path, dtype=torch.float64).eval()
    for block in sorted(blocks, reverse=True):
        config = copy.deepcopy(model.config)
        target = getattr(config, sub_config) if sub_config else config
        target.num_hidden_layers -= 1
        smaller = type(model)(config).to(torch.float64).eval()
        model = load_without_block(model, smaller, block, prefix)
    return model


def _scores(loaded, corpus, engine, windows=None):
    stack = find_layers(loaded.model, loaded.spec.layers_path)
    scorer = CorpusScorer(loaded, stack, corpus, list(SPANS), batch_size=3, engine=engine, windows=windows, seed=SEED)
    found = {}
    for span in [(), *SPANS]:
        with scorer.variant(span or None):
            found[span] = scorer.score("corpus")
    return scorer, found


def _assert_matches(evaluation, metric, reference):
    got = evaluation.per_sample[metric].values["corpus"]
    assert [got[i] for i in range(len(reference))] == pytest.approx(reference, abs=3e-5), metric
    mean = sum(reference) / len(reference)
    assert evaluation.metrics[metric].value == pytest.approx(mean, abs=3e-5)
    sd = math.sqrt(sum((v - mean) ** 2 for v in reference) / (len(reference) - 1) / len(reference))
    assert evaluation.metrics[metric].stderr == pytest.approx(sd, abs=3e-5)


def _reference_masks(tokenizer, windows):
    """15 % of each window's non-special tokens, drawn by torch's generator seeded from (SEED, window index)."""
    special = set(tokenizer.all_special_ids)
    masks = []
    for index, window in enumerate(windows):
        candidates = [i for i, t in enumerate(window.input_ids) if t not in special]
        generator = torch.Generator().manual_seed(SEED * 1_000_003 + index)
        count = max(1, round(0.15 * len(candidates)))
        masks.append(sorted(candidates[i] for i in torch.randperm(len(candidates), generator=generator)[:count]))
    return masks


def _logit_reference(base_logits, variant_logits, targets=None):
    lp_base, lp_var = base_logits.log_softmax(-1), variant_logits.log_softmax(-1)
    found = {
        "kl": float((lp_base.exp() * (lp_base - lp_var)).sum(-1).mean()),
        "top1_agreement": float((lp_base.argmax(-1) == lp_var.argmax(-1)).double().mean()),
    }
    if targets is not None:
        found["nll"] = float(-lp_var[torch.arange(len(targets)), targets].mean())
    return found


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["shared", "simple"])
def test_masked_lm_scores_match_own_masked_loss_on_rebuilt_models(built, engine):
    path = built["bert_mlm"]
    loaded = load_model(ModelSpec(str(path), dtype="float32", device="cpu"), purpose=MASKED_LM)
    scorer, found = _scores(loaded, TEXT, engine)
    assert scorer.engine == engine and scorer.estimator.name == MASKED_TOKEN
    windows = scorer.windows
    masks = _reference_masks(loaded.tokenizer, windows)
    mask_id = loaded.tokenizer.mask_token_id
    base = tf.AutoModelForMaskedLM.from_pretrained(path, dtype=torch.float64).eval()
    for span in [(), *SPANS]:
        variant = _rebuilt_float64(path, tf.AutoModelForMaskedLM, span, "bert.encoder.layer.") if span else base
        reference = {"nll": [], "kl": [], "top1_agreement": []}
        with torch.no_grad():
            for window, positions in zip(windows, masks, strict=True):
                ids = torch.tensor([window.input_ids])
                masked = ids.clone()
                masked[0, positions] = mask_id
                pick = torch.tensor(positions)
                values = _logit_reference(
                    base(input_ids=masked).logits[0, pick], variant(input_ids=masked).logits[0, pick], ids[0, pick]
                )
                for key, value in values.items():
                    reference[key].append(value)
        for metric, values in reference.items():
            _assert_matches(found[span], metric, values)
        nll = sum(reference["nll"]) / len(windows)
        assert found[span].metrics["perplexity"].value == pytest.approx(math.exp(nll), rel=1e-4)
        if span:
            assert found[span].metrics["kl"].value > 1e-3  # the test can tell a removed block from none
    assert found[()].metrics["kl"].value == pytest.approx(0, abs=1e-7)


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["shared", "simple"])
def test_image_classifier_scores_match_rebuilt_models_class_logits(built, engine):
    path = built["vit_classifier"]
    corpus = CorpusSpec(str(built["images"]), tokens=80)  # 5 images of 16 patches
    spec = ModelSpec(str(path), dtype="float32", device="cpu")
    estimator = estimator_before_loading(spec, load_config(spec))
    assert estimator.name == CLASS_LOGITS
    from layerprobe.data import images_before_loading

    processor, images = images_before_loading(spec, corpus)
    loaded = load_model(spec, purpose=estimator.purpose, tokenizer=processor)
    scorer, found = _scores(loaded, corpus, engine, windows=images)
    assert scorer.engine == engine and list(found[()].metrics) == ["kl", "top1_agreement"]
    pixels = torch.stack([torch.from_numpy(w.pixels["pixel_values"]) for w in images]).double()
    base = tf.ViTForImageClassification.from_pretrained(path, dtype=torch.float64).eval()
    with torch.no_grad():
        base_logits = base(pixel_values=pixels).logits
        for span in SPANS:
            variant = _rebuilt_float64(path, tf.ViTForImageClassification, span, "vit.layers.")
            logits = variant(pixel_values=pixels).logits
            per_image = [_logit_reference(base_logits[i : i + 1], logits[i : i + 1]) for i in range(len(images))]
            for metric in ("kl", "top1_agreement"):
                _assert_matches(found[span], metric, [p[metric] for p in per_image])
            assert found[span].metrics["kl"].value > 1e-3


@pytest.mark.slow
@pytest.mark.parametrize(
    ("layers_path", "engine"),
    [
        ("vision_model.encoder.layers", "shared"),
        ("vision_model.encoder.layers", "simple"),
        ("text_model.encoder.layers", "shared"),
        ("text_model.encoder.layers", "simple"),
    ],
)
def test_headless_tower_pooled_cosine_distance_matches_rebuilt_tower(built, layers_path, engine):
    path = built["clip"]
    vision = layers_path.startswith("vision")
    corpus = CorpusSpec(str(built["images"]), tokens=80) if vision else TEXT
    spec = ModelSpec(str(path), dtype="float32", device="cpu", layers_path=layers_path)
    estimator = estimator_before_loading(spec, load_config(spec))
    assert estimator.name == POOLED_OUTPUT and estimator.reads_images == vision
    loaded = load_model(spec, purpose=estimator.purpose)
    scorer, found = _scores(loaded, corpus, engine)
    assert list(found[()].metrics) == ["cosine_distance"]
    base = tf.CLIPModel.from_pretrained(path, dtype=torch.float64).eval()
    if vision:
        inputs = {"pixel_values": torch.stack([torch.from_numpy(w.pixels["pixel_values"]) for w in scorer.windows])}
        inputs["pixel_values"] = inputs["pixel_values"].double()
    else:
        inputs = {"input_ids": torch.tensor([w.input_ids for w in scorer.windows])}  # equal lengths: one batch
    tower = "vision_model" if vision else "text_model"
    with torch.no_grad():
        pooled = getattr(base, tower)(**inputs).pooler_output
        for span in SPANS:
            sub = "vision_config" if vision else "text_config"
            variant = _rebuilt_float64(path, tf.CLIPModel, span, f"{layers_path}.", sub)
            other = getattr(variant, tower)(**inputs).pooler_output
            reference = (1 - torch.nn.functional.cosine_similarity(pooled, other, dim=-1)).tolist()
            _assert_matches(found[span], "cosine_distance", reference)
            assert found[span].metrics["cosine_distance"].value > 1e-3
    assert found[()].metrics["cosine_distance"].value == pytest.approx(0, abs=1e-6)
