"""describe_stack: what `layerprobe layers` prints, as one library call that reads no weights."""

from __future__ import annotations

import transformers as tf
from typer.testing import CliRunner

import layerprobe.model.describe as describe
from layerprobe.cli.app import app
from layerprobe.core import ModelSpec
from layerprobe.model import Progress, StackDescription, describe_stack


def test_the_stack_of_a_checkpoint_without_its_weights(tiny_checkpoints):
    stages = []
    spec = ModelSpec(str(tiny_checkpoints["gpt2"]))
    found = describe_stack(spec, progress=Progress(on_stage=lambda name, _total, _unit: stages.append(name)))
    assert isinstance(found, StackDescription)
    assert stages == ["Reading config", "Tracing norm placement"]
    assert (found.path, found.num_layers, found.block_class) == ("h", 4, "GPT2Block")
    assert found.block_classes == ["GPT2Block"] * 4 and found.kind == "causal-lm"
    real = tf.AutoModel.from_pretrained(tiny_checkpoints["gpt2"])
    assert found.parameters == [sum(p.numel() for p in block.parameters()) for block in real.h]
    assert found.architecture == real.config.architectures[0]
    assert found.placement is not None and found.placement_error is None
    assert len(found.placement.blocks) == 4
    assert [(b.attention.module, b.mlp.module) for b in found.placement.blocks] == [("attn", "mlp")] * 4


def test_without_placement_nothing_is_traced(tiny_checkpoints, monkeypatch):
    monkeypatch.setattr(describe, "placement_without_weights", lambda *a: (_ for _ in ()).throw(AssertionError))
    found = describe_stack(ModelSpec(str(tiny_checkpoints["llama"])), placement=False)
    assert found.placement is None and found.placement_error is None and found.num_layers == 4


def test_a_model_that_cannot_be_traced_is_still_described_with_the_reason(tiny_checkpoints, monkeypatch):
    def fail(*_args):
        raise RuntimeError("no meta kernel for [op]")

    monkeypatch.setattr(describe, "placement_without_weights", fail)
    found = describe_stack(ModelSpec(str(tiny_checkpoints["llama"])))
    assert found.placement is None and found.placement_error == "no meta kernel for [op]"
    result = CliRunner().invoke(app, ["layers", str(tiny_checkpoints["llama"])])
    assert result.exit_code == 0, result.output
    assert "warning: norm placement not traced: no meta kernel for [op]" in result.stderr
    assert "L = 4" in result.stdout and "placement:" not in result.stdout
