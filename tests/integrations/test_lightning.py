"""`LayerprobeLightningCallback` with a real tiny LightningModule: what it logs is what the monitor measured,
gradients come from the step's own backward, and training is unchanged (skipped without Lightning)."""

from __future__ import annotations

import pytest
import torch
import transformers as tf
from factories import build_checkpoint

from layerprobe.integrations.scalars import PREFIX
from layerprobe.results import load_result

pl = pytest.importorskip("pytorch_lightning")
STEPS, EVERY = 6, 3


class Tiny(pl.LightningModule):
    """A causal LM on a fixed batch list; records each step's loss."""

    def __init__(self, path):
        super().__init__()
        self.model = tf.AutoModelForCausalLM.from_pretrained(path).train()
        self.losses = []

    def training_step(self, batch, _index):
        loss = self.model(input_ids=batch, labels=batch).loss
        self.losses.append(float(loss.detach()))
        return loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=3e-3)


def fit(path, callbacks, accumulate=1):
    torch.manual_seed(0)
    module = Tiny(path)
    data = [torch.randint(0, module.model.config.vocab_size, (32,)) for _ in range(16)]
    loader = torch.utils.data.DataLoader(data, batch_size=2)
    trainer = pl.Trainer(
        max_steps=STEPS,
        accelerator="cpu",
        devices=1,
        callbacks=callbacks,
        accumulate_grad_batches=accumulate,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(module, loader)
    return trainer, module


@pytest.mark.slow
@pytest.mark.parametrize("accumulate", [1, 2])
def test_a_lightning_run_logs_what_the_monitor_measured(tmp_path, accumulate):
    from layerprobe.integrations.lightning import LayerprobeLightningCallback

    path = build_checkpoint("llama", tmp_path / "llama")
    tokenizer = tf.AutoTokenizer.from_pretrained(path)
    callback = LayerprobeLightningCallback(
        tokenizer, every=EVERY, corpus="builtin:pydoc", out=tmp_path / "runs", tokens=256, seq_len=64
    )
    trainer, module = fit(path, [callback], accumulate)
    assert [step for step, _ in callback.history] == [3, 6]
    for step, values in callback.history:
        result = load_result(tmp_path / "runs" / f"step-{step}" / "angular.json")
        assert values[PREFIX + "adjacent_d/block_1"] == result.distance[1][2]
        assert f"{PREFIX}grad_norm/block_3" in values
    logged = trainer.callback_metrics  # what pl_module.log_dict handed the loggers, as of the last step
    assert float(logged[PREFIX + "lazy_blocks"]) == callback.history[-1][1][PREFIX + "lazy_blocks"]
    assert module.model.training
    _, plain = fit(path, [], accumulate)
    assert module.losses == plain.losses and len(plain.losses) == STEPS * accumulate


def test_the_model_is_found_or_refused_in_one_line(tmp_path):
    from layerprobe.core import LayerprobeError
    from layerprobe.integrations.lightning import _transformers_model

    class Empty(pl.LightningModule):
        pass

    with pytest.raises(LayerprobeError, match="holds no transformers model"):
        _transformers_model(Empty(), None)
    with pytest.raises(LayerprobeError, match="no transformers model at .net"):
        _transformers_model(Empty(), "net")
