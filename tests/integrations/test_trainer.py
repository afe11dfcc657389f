"""`LayerprobeCallback` in a tiny CPU Trainer run: what TensorBoard receives is what `layerprobe angular` reports.

The run trains a tiny LLaMA for 6 steps on one repeated example (so every batch is the same batch and the
gradient at step n can be recomputed from checkpoint n-1), logging to TensorBoard and measuring every 3 steps.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import transformers as tf
from command_line import invoke

from layerprobe.integrations import LayerprobeCallback
from layerprobe.model import find_layers
from layerprobe.results import load_result

STEPS, EVERY = 6, 3
CALIBRATION = dict(tokens=256, seq_len=64, batch_size=4)
CLI_CALIBRATION = ["--dataset", "builtin:pydoc", "--tokens", "256", "--seq-len", "64", "--batch-size", "4"]


class Repeated(torch.utils.data.Dataset):
    """One causal-LM example, eight times."""

    def __init__(self, tokenizer):
        ids = tokenizer("Every batch of this run is the same batch of text. " * 4)["input_ids"][:40]
        self.example = {"input_ids": torch.tensor(ids), "labels": torch.tensor(ids)}

    def __len__(self):
        return 8

    def __getitem__(self, index):
        return dict(self.example)


def train(path, out, callback=None, **precision):
    model = tf.AutoModelForCausalLM.from_pretrained(path)
    tokenizer = tf.AutoTokenizer.from_pretrained(path)
    args = tf.TrainingArguments(
        output_dir=str(out / "trainer"),
        max_steps=STEPS,
        per_device_train_batch_size=2,
        learning_rate=3e-3,
        logging_steps=1,
        save_strategy="steps",
        save_steps=1,
        max_grad_norm=0.0,  # raw gradients: the reference below recomputes them unclipped
        report_to=["tensorboard"] if callback else [],
        use_cpu=True,
        seed=0,
        disable_tqdm=True,
        save_only_model=True,
        **precision,
    )
    trainer = tf.Trainer(
        model=model,
        args=args,
        train_dataset=Repeated(tokenizer),
        processing_class=tokenizer,
        callbacks=[callback] if callback else [],
    )
    trainer.train()
    return trainer, model, tokenizer


def tensorboard_scalars(directory):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    found = {}
    for events in directory.rglob("events.out.tfevents.*"):
        accumulator = EventAccumulator(str(events.parent))
        accumulator.Reload()
        for tag in accumulator.Tags()["scalars"]:
            for event in accumulator.Scalars(tag):
                found[(tag, event.step)] = event.value
    return found


@pytest.mark.slow
def test_trainer_run_logs_what_the_cli_reports(tiny_checkpoints, tmp_path):
    path = tiny_checkpoints["llama"]
    callback = LayerprobeCallback(every=EVERY, corpus="builtin:pydoc", out=tmp_path / "runs", **CALIBRATION)
    trainer, model, _ = train(path, tmp_path / "with", callback)
    assert model.training  # given back in training mode
    scalars = tensorboard_scalars(tmp_path / "with" / "trainer")  # TensorBoard writes under output_dir
    for step in (3, 6):
        checkpoint = tmp_path / "with" / "trainer" / f"checkpoint-{step}"
        result = invoke(
            "angular", checkpoint, *CLI_CALIBRATION, "--device", "cpu", "--quiet", "--out", tmp_path / str(step)
        )
        assert result.exit_code == 0, result.output
        cli = json.loads((tmp_path / str(step) / "angular.json").read_text())
        summary = cli["summary"]
        for block, d in enumerate(summary["adjacent"]):
            assert scalars[(f"train/layerprobe/adjacent_d/block_{block}", step)] == pytest.approx(d, rel=1e-5)
        assert scalars[("train/layerprobe/lazy_blocks", step)] == summary["lazy_count"]
        assert scalars[("train/layerprobe/mean_adjacent_d", step)] == pytest.approx(summary["mean_adjacent"], rel=1e-5)
        # the run directory the callback wrote holds the same matrix, and names its step
        written = load_result(tmp_path / "runs" / f"step-{step}" / "angular.json")
        np.testing.assert_allclose(written.distance, cli["distance"], atol=2e-6)
        assert written.model.revision == f"step-{step}"
        # gradient norms: the step's own gradient, recomputed by autograd from the previous checkpoint
        reference = grad_reference(tmp_path / "with" / "trainer" / f"checkpoint-{step - 1}", trainer)
        for block, norm in enumerate(reference):
            assert scalars[(f"train/layerprobe/grad_norm/block_{block}", step)] == pytest.approx(norm, rel=1e-4)
    assert ("train/layerprobe/lazy_blocks", 2) not in scalars  # only the measured steps
    # track reads the run directories in step order
    result = invoke(
        "track", tmp_path / "runs" / "step-6", tmp_path / "runs" / "step-3", "--quiet", "--out", tmp_path / "t"
    )
    assert result.exit_code == 0, result.output
    track = json.loads((tmp_path / "t" / "track.json").read_text())
    assert [run["step"] for run in track["runs"]] == [3, 6]

    # the same run without the callback trains identically
    plain, _, _ = train(path, tmp_path / "without")
    losses = [(e["step"], e["loss"]) for e in trainer.state.log_history if "loss" in e]
    assert losses == [(e["step"], e["loss"]) for e in plain.state.log_history if "loss" in e]
    assert len(losses) == STEPS


@pytest.mark.slow
def test_mixed_precision_training_is_measured_in_the_models_own_precision_and_trains_alike(tiny_checkpoints, tmp_path):
    """bf16 autocast (Trainer's `bf16=True`, on CPU too): the callback measures outside the autocast region,
    on the float32 weights, exactly as the CLI does on the saved checkpoint, and the losses are unchanged."""
    path = tiny_checkpoints["llama"]
    callback = LayerprobeCallback(every=EVERY, corpus="builtin:pydoc", out=tmp_path / "runs", **CALIBRATION)
    trainer, model, _ = train(path, tmp_path / "with", callback, bf16=True)
    assert model.training and next(model.parameters()).dtype == torch.float32
    checkpoint = tmp_path / "with" / "trainer" / f"checkpoint-{EVERY}"
    result = invoke("angular", checkpoint, *CLI_CALIBRATION, "--device", "cpu", "--quiet", "--out", tmp_path / "cli")
    assert result.exit_code == 0, result.output
    cli = json.loads((tmp_path / "cli" / "angular.json").read_text())
    written = load_result(tmp_path / "runs" / f"step-{EVERY}" / "angular.json")
    np.testing.assert_allclose(written.distance, cli["distance"], atol=2e-6)
    plain, _, _ = train(path, tmp_path / "without", bf16=True)
    losses = [(e["step"], e["loss"]) for e in trainer.state.log_history if "loss" in e]
    assert losses == [(e["step"], e["loss"]) for e in plain.state.log_history if "loss" in e]


def grad_reference(checkpoint, trainer):
    """‖∂ loss / ∂θ_block‖ for one batch of the repeated example, by torch.autograd.grad on the checkpoint."""
    model = tf.AutoModelForCausalLM.from_pretrained(checkpoint)
    batch = next(iter(trainer.get_train_dataloader()))
    loss = model(input_ids=batch["input_ids"], labels=batch["labels"]).loss
    blocks = find_layers(model.model).blocks
    norms = []
    for block in blocks:
        grads = torch.autograd.grad(loss, list(block.parameters()), retain_graph=True)
        norms.append(float(torch.sqrt(sum(g.double().pow(2).sum() for g in grads))))
    return norms


@pytest.mark.parametrize(
    "every, on_save, strategy, save_steps, due",
    [
        (3, False, "steps", 2, [3, 6]),
        (3, True, "steps", 2, [2, 3, 4, 6]),
        (3, True, "epoch", 2, [3, 6]),
        (5, True, tf.trainer_utils.SaveStrategy.STEPS, 4, [4, 5]),
    ],
)
def test_which_steps_are_measured(every, on_save, strategy, save_steps, due):
    from types import SimpleNamespace

    callback = LayerprobeCallback(every=every, corpus="builtin:pydoc", on_save=on_save)
    args = SimpleNamespace(save_strategy=strategy, save_steps=save_steps)
    assert [step for step in range(1, 7) if callback.due(args, step)] == due


@pytest.mark.parametrize("every", [0, -1, 2.5])
def test_every_is_a_positive_number_of_steps(every):
    from layerprobe.core import LayerprobeError

    with pytest.raises(LayerprobeError, match="every must be a positive number of steps"):
        LayerprobeCallback(every=every)
