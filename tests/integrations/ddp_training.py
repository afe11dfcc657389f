"""A tiny Trainer run that `tests/integrations/test_ddp.py` starts under `accelerate launch` on two CPU ranks.

    accelerate launch --multi_gpu --num_processes 2 tests/integrations/ddp_training.py CHECKPOINT OUT [options]

The same run twice in one launch: without the callback, then with it. Each rank writes `OUT/rank<R>.json`:
both runs' log histories, how many measurement batches the rank ran itself (block 0's forward calls in eval
mode: the monitor measures in eval mode, training runs in train mode), the monitor's world size, the scalars
the callback logged on that rank, and on rank 0 the final model measured by this process alone.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
import transformers as tf

from layerprobe.integrations import LayerprobeCallback
from layerprobe.model import World

STEPS, EVERY = 6, 3
CALIBRATION = dict(tokens=384, seq_len=64, batch_size=2)  # 6 windows, 3 batches: shared 2 + 1


class Texts(torch.utils.data.Dataset):
    """Eight different causal-LM examples (each rank draws its own share of every batch)."""

    def __init__(self, tokenizer):
        words = "layer probe measures which blocks of a model do work while it trains".split()
        self.examples = []
        for i in range(8):
            ids = tokenizer(" ".join(words[i:] + words[:i]) * 3)["input_ids"][:32]
            self.examples.append({"input_ids": torch.tensor(ids), "labels": torch.tensor(ids)})

    def __len__(self):
        return len(self.examples)

    def __getitem__(self, index):
        return dict(self.examples[index])


class LogAtMeasuredSteps(tf.TrainerCallback):
    """The run without the monitor logs at the steps the monitor asks logs for, so the two logs pair up."""

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step % EVERY == 0:
            control.should_log = True
        return control


class Reported(tf.TrainerCallback):
    """What the reporting callbacks (TensorBoard, W&B, …) receive on this rank: every `logs` dict of on_log."""

    def __init__(self):
        self.logs = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        self.logs.append({**(logs or {}), "step": state.global_step})


def train(args: argparse.Namespace, callback: tf.TrainerCallback) -> tuple[tf.Trainer, dict]:
    model = tf.AutoModelForCausalLM.from_pretrained(args.checkpoint)
    tokenizer = tf.AutoTokenizer.from_pretrained(args.checkpoint)
    if args.checkpointing:
        model.gradient_checkpointing_enable()
    counted = {"eval_batches": 0}
    reported = Reported()

    def count(module, _inputs):
        if not module.training:
            counted["eval_batches"] += 1

    model.model.layers[0].register_forward_pre_hook(count)
    training = tf.TrainingArguments(
        output_dir=str(args.out / "trainer"),
        max_steps=STEPS,
        per_device_train_batch_size=2,
        gradient_accumulation_steps=args.accumulate,
        learning_rate=3e-3,
        logging_steps=4,  # not the measured steps: the callback asks for those logs itself, on every rank
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        seed=0,
        disable_tqdm=True,
    )
    trainer = tf.Trainer(
        model=model,
        args=training,
        train_dataset=Texts(tokenizer),
        processing_class=tokenizer,
        callbacks=[callback, reported],
    )
    trainer.train()
    counted["reported"] = reported.logs
    return trainer, counted


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("checkpoint", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--accumulate", type=int, default=1)
    parser.add_argument("--checkpointing", action="store_true")
    args = parser.parse_args()
    plain, _ = train(args, LogAtMeasuredSteps())
    callback = LayerprobeCallback(every=EVERY, corpus="builtin:pydoc", out=args.out / "runs", **CALIBRATION)
    watched, counted = train(args, callback)
    monitor = callback.monitor
    assert monitor is not None
    rank = watched.args.process_index
    record = {
        "plain_log": plain.state.log_history,
        "log": watched.state.log_history,
        "eval_batches": counted["eval_batches"],
        "reported": counted["reported"],
        "world_size": watched.args.world_size,
        "monitor_world": monitor.world.size,
        "history": callback.history,
        "training": watched.model.training,
        "alone": monitor.measure(STEPS, World())[0].distance if rank == 0 else None,
    }
    (args.out / f"rank{rank}.json").write_text(json.dumps(record))


if __name__ == "__main__":
    main()
