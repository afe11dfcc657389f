"""`lp.Monitor` in a plain training loop: fixed calibration windows, gradients from the loop's own backward,
run directories `track` reads, and a failure that is one warning line, never an exception."""

from __future__ import annotations

import logging

import pytest
import torch
import transformers as tf

import layerprobe as lp
from layerprobe.integrations.scalars import PREFIX
from layerprobe.model import find_layers
from layerprobe.results import load_result


@pytest.fixture
def loop(tiny_checkpoints):
    path = tiny_checkpoints["llama"]
    model = tf.AutoModelForCausalLM.from_pretrained(path).train()
    tokenizer = tf.AutoTokenizer.from_pretrained(path)
    return model, tokenizer


def test_a_plain_loop_logs_gradients_of_its_own_backward_and_writes_steps(loop, tmp_path):
    model, tokenizer = loop
    monitor = lp.Monitor(model, tokenizer, "builtin:pydoc", tmp_path / "runs", tokens=256, seq_len=64, depth=False)
    windows = [w.input_ids for w in monitor.windows]
    ids = torch.tensor([tokenizer("A batch of training text, " * 8)["input_ids"][:32]] * 2)
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    grads = monitor.record_gradients()
    blocks = find_layers(model.model).blocks
    for block, norm in zip(blocks, grads, strict=True):
        reference = torch.sqrt(sum(p.grad.double().pow(2).sum() for p in block.parameters()))
        assert norm == pytest.approx(float(reference), rel=1e-12)
    values = monitor.step(7)
    assert values[PREFIX + "grad_norm/block_0"] == grads[0]
    assert monitor.step(8).keys().isdisjoint({PREFIX + "grad_norm/block_0"})  # used once, then cleared
    assert model.training and all(p.grad is not None for p in blocks.parameters())
    assert [w.input_ids for w in monitor.windows] == windows  # the calibration set never changes
    result = load_result(tmp_path / "runs" / "step-7" / "angular.json")
    assert result.model.revision == "step-7"
    assert values[PREFIX + "adjacent_d/block_1"] == result.distance[1][2]
    assert values[PREFIX + "lazy_blocks"] == result.summarize()["lazy_count"]
    assert values[PREFIX + "lazy_blocks_low"] <= values[PREFIX + "lazy_blocks"] <= values[PREFIX + "lazy_blocks_high"]


def test_a_failed_measurement_is_one_warning_line(loop, monkeypatch, caplog):
    model, tokenizer = loop
    monitor = lp.Monitor(model, tokenizer, "builtin:pydoc", tokens=128, seq_len=64, depth=False)

    def broken(*_args, **_kwargs):
        raise RuntimeError("CUDA out of memory.\nTried to allocate 2 GiB")

    monkeypatch.setattr("layerprobe.integrations.monitor.run_angular", broken)
    with caplog.at_level(logging.WARNING, logger="layerprobe"):
        assert monitor.step(3) == {}
    assert [r.getMessage() for r in caplog.records] == [
        "layerprobe: measurement at step 3 failed: RuntimeError: CUDA out of memory."
    ]
    assert model.training


def test_only_rank_zero_measures(loop, monkeypatch):
    model, tokenizer = loop
    monkeypatch.setenv("RANK", "1")
    monitor = lp.Monitor(model, tokenizer, "builtin:pydoc", tokens=128, seq_len=64)
    assert monitor.windows == [] and monitor.step(5) == {} and monitor.record_gradients() is None


def test_a_step_directory_already_written_is_kept(loop, tmp_path, caplog):
    model, tokenizer = loop
    monitor = lp.Monitor(model, tokenizer, "builtin:pydoc", tmp_path, tokens=128, seq_len=64, depth=False)
    (tmp_path / "step-2").mkdir()
    (tmp_path / "step-2" / "angular.json").write_text("mine")
    with caplog.at_level(logging.WARNING, logger="layerprobe"):
        assert monitor.step(2)
    assert (tmp_path / "step-2" / "angular.json").read_text() == "mine"
    assert "is kept (not overwritten)" in caplog.text
