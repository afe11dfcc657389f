"""prune-drop and prune-curve `--task corpus` on encoders and towers: the estimator said and recorded, curves run.

The numbers themselves are checked against rebuilt float64 models in tests/evaluate/test_corpus_estimators.py.
"""

from __future__ import annotations

import json

import pytest
from command_line import flat, invoke, invoke_prune_drop
from factories.checkpoints import build_bert_mlm, quiet_logs
from factories.towers import build_tower_checkpoint, write_image_folder

from layerprobe.core import BUILTIN_CORPUS


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("estimators_cli")
    with quiet_logs():
        return {
            "bert_mlm": build_bert_mlm(root / "bert_mlm", initializer_range=0.3),
            "vit_classifier": build_tower_checkpoint("vit_classifier", root / "vit_classifier"),
            "clip": build_tower_checkpoint("clip", root / "clip"),
            "images": write_image_folder(root / "images", count=5),
        }


@pytest.mark.slow
def test_prune_drop_on_a_masked_lm_says_and_records_its_estimator(built, tmp_path):
    out = tmp_path / "out"
    args = ["--task", "corpus", "--dataset", BUILTIN_CORPUS, "--tokens", 96, "--seq-len", 24, "--seed", 7]
    result = invoke_prune_drop(built["bert_mlm"], *args, "--device", "cpu", "--out", out)
    assert result.exit_code == 0, result.output
    notes = [line for line in result.output.splitlines() if "corpus metric:" in line]
    assert len(notes) == 1 and "masked-token" in notes[0] and "BertForMaskedLM" in notes[0], result.output
    data = json.loads((out / "prune_drop.json").read_text())
    record = data["settings"]["corpus_metric"]
    assert record["estimator"] == "masked-token" and record["mask_fraction"] == 0.15 and record["mask_seed"] == 7
    assert "masked-LM head" in record["reason"] and record["metrics"] == ["nll", "perplexity", "kl", "top1_agreement"]
    assert sorted(data["tasks"]["corpus"]["metrics"]) == ["kl", "nll", "perplexity", "top1_agreement"]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("model", "extra", "estimator", "driver"),
    [
        ("vit_classifier", [], "class-logits", "kl"),
        ("clip", ["--layers-path", "vision_model.encoder.layers"], "pooled-output", "cosine_distance"),
    ],
)
def test_prune_curve_searches_on_an_image_tower(built, tmp_path, model, extra, estimator, driver):
    args = [built[model], *extra, "--task", "corpus", "--dataset", built["images"], "--tokens", 80]
    args += ["--methods", "greedy,last", "--max-fraction", "0.5", "--device", "cpu", "--out", tmp_path, "-q"]
    result = invoke("prune-curve", *args)
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "prune_curve.json").read_text())
    assert data["settings"]["corpus_metric"]["estimator"] == estimator
    assert data["settings"]["metric"]["metric"] == driver
    assert sorted(data["methods"]["greedy"]["sets"]) == ["1", "2"]


@pytest.mark.slow
def test_prune_curve_refuses_a_metric_the_estimator_does_not_report(built, tmp_path, monkeypatch):
    """Before any weight loads; the hinted metric then runs (angular and last, on the images)."""
    import transformers as tf

    args = [built["vit_classifier"], "--task", "corpus", "--dataset", built["images"], "--tokens", 80]
    with monkeypatch.context() as patched:
        patched.setattr(tf.AutoModelForImageClassification, "from_pretrained", lambda *a, **k: pytest.fail("loaded"))
        result = invoke("prune-curve", *args, "--metric", "corpus:nll", "--device", "cpu", "--out", tmp_path, "-q")
    assert result.exit_code == 2, result.output
    assert "reports kl, top1_agreement for this model (class-logits)" in flat(result.output)
    hint = [line for line in result.output.splitlines() if line.startswith("hint:")][0]
    tried = invoke("prune-curve", *args, "--metric", hint.split("--metric ")[1].strip(), "--max-fraction", "0.25",
                   "--device", "cpu", "--out", tmp_path, "-q")  # fmt: skip
    assert tried.exit_code == 0, tried.output
    data = json.loads((tmp_path / "prune_curve.json").read_text())
    assert data["settings"]["metric"]["metric"] == "top1_agreement"


@pytest.mark.slow
def test_prune_drop_on_a_vlm_vision_tower_scores_its_pooled_output_on_both_engines(tmp_path):
    """PaliGemma's vision encoder (no head of its own): the same cosine distances from either engine."""
    with quiet_logs():
        model = build_tower_checkpoint("paligemma", tmp_path / "paligemma")
    images = write_image_folder(tmp_path / "images", count=4)
    found = {}
    for engine in ("shared", "simple"):
        out = tmp_path / engine
        args = ["--layers-path", "vision_tower.encoder.layers", "--task", "corpus", "--dataset", images]
        result = invoke_prune_drop(model, *args, "--tokens", 64, "--engine", engine, "--device", "cpu", "--out", out)
        assert result.exit_code == 0, result.output
        data = json.loads((out / "prune_drop.json").read_text())
        assert data["settings"]["corpus_metric"]["estimator"] == "pooled-output"
        found[engine] = data["tasks"]["corpus"]["metrics"]["cosine_distance"]["pruned"]
    assert found["shared"] == pytest.approx(found["simple"], abs=1e-5) and min(found["shared"]) > 1e-3
