"""prune-drop on mllama's language model: its image-only block is left out in one line, every other block scored.

The reference: the corpus NLL of a model rebuilt in the test without each block (tests/model), computed directly.
"""

from __future__ import annotations

import json

import pytest
import torch
import transformers as tf
from command_line import flat, invoke
from factories.towers import build_tower_checkpoint, mllama_without

from layerprobe.core import BUILTIN_CORPUS, CorpusSpec
from layerprobe.data import build_windows, iter_documents

TOKENS, SEQ = 64, 16


def _nll(model, windows) -> float:
    """Mean next-token negative log-likelihood over the windows' positions, in float64."""
    total, count = 0.0, 0
    for window in windows:
        ids = torch.tensor([window.input_ids])
        with torch.no_grad():
            logprobs = model(input_ids=ids, use_cache=False).logits.double().log_softmax(-1)
        total -= float(logprobs[0, :-1].gather(-1, ids[0, 1:, None]).sum())
        count += ids.shape[1] - 1
    return total / count


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["shared", "simple"])
def test_prune_drop_scores_the_blocks_that_run_text_only_as_rebuilt_models(tmp_path, engine):
    path = build_tower_checkpoint("mllama", tmp_path / "mllama")
    args = ("--task", "corpus", "--dataset", "builtin:pydoc", "--tokens", str(TOKENS), "--seq-len", str(SEQ))
    result = invoke("prune-drop", path, *args, "--engine", engine, "--out", tmp_path / "out", env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    assert "Start(s) 2 not evaluated" in flat(result.output) and "changes nothing text-only" in flat(result.output)
    record = json.loads((tmp_path / "out" / "prune_drop.json").read_text())
    assert record["model"]["skipped_blocks"] == [2]
    nll = record["tasks"]["corpus"]["metrics"]["nll"]
    assert nll["layers"] == [0, 1, 3]
    source = tf.MllamaForConditionalGeneration.from_pretrained(path).eval()
    tokenizer = tf.AutoTokenizer.from_pretrained(path)
    windows = build_windows(
        tokenizer, iter_documents(CorpusSpec(BUILTIN_CORPUS, None, "train", "text", TOKENS, SEQ)), TOKENS, SEQ
    )
    assert nll["baseline"] == pytest.approx(_nll(source, windows), abs=1e-5)
    for removed, pruned in zip(nll["layers"], nll["pruned"], strict=True):
        kept = [i for i in range(4) if i != removed]
        assert pruned == pytest.approx(_nll(mllama_without(source, kept), windows), abs=1e-5), removed


@pytest.mark.slow  # builds the tiny mllama checkpoint (~4 s)
@pytest.mark.parametrize("unit", ["attention", "mlp"])
def test_a_sublayer_unit_on_mllama_is_one_line_before_any_weight(tmp_path, monkeypatch, unit):
    """The image-only block's sublayers cannot be traced text-only: refused from the config, no weight read.

    `--unit block` (the hint) is the test above. Every model class's `from_pretrained` fails here (mllama
    loads through its own class, not an Auto class), so an exit of 2 with the line proves no weight loaded.
    """
    path = build_tower_checkpoint("mllama", tmp_path / "mllama")

    def fail(*_args, **_kwargs):
        raise AssertionError("weights were loaded before the refusal")

    monkeypatch.setattr(tf.PreTrainedModel, "from_pretrained", classmethod(fail))
    args = ("--task", "corpus", "--dataset", "builtin:pydoc", "--tokens", str(TOKENS), "--seq-len", str(SEQ))
    result = invoke("prune-drop", path, *args, "--unit", unit, "--out", tmp_path / "out", env={"COLUMNS": "250"})
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    lines = result.output.strip().splitlines()
    assert lines[-2].startswith("error: ") and "Block 2 of 'layers' runs only with an image" in lines[-2], result.output
    assert lines[-1].startswith("hint: ") and "--unit block" in lines[-1]
    assert not (tmp_path / "out" / "prune_drop.json").exists()


@pytest.mark.slow  # builds the tiny mllama checkpoint (~4 s)
def test_a_sublayer_curve_on_mllama_is_one_line_before_any_weight(tmp_path, monkeypatch):
    """prune-curve --unit sublayers: refused as prune-drop's sublayer units are, before any weight is read."""
    path = build_tower_checkpoint("mllama", tmp_path / "mllama")

    def fail(*_args, **_kwargs):
        raise AssertionError("weights were loaded before the refusal")

    monkeypatch.setattr(tf.PreTrainedModel, "from_pretrained", classmethod(fail))
    args = ("--task", "corpus", "--dataset", "builtin:pydoc", "--tokens", str(TOKENS), "--seq-len", str(SEQ))
    result = invoke(
        "prune-curve", path, *args, "--unit", "sublayers", "--methods", "delta", "--out", tmp_path / "out",
        env={"COLUMNS": "250"},
    )  # fmt: skip
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    lines = result.output.strip().splitlines()
    assert lines[-2].startswith("error: ") and "Block 2 of 'layers' runs only with an image" in lines[-2], result.output
    assert not (tmp_path / "out" / "prune_curve.json").exists()
