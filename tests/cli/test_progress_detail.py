"""The progress bar shows a stage's detail (heal's LoRA loss) beside its rate, and a new stage clears it."""

from __future__ import annotations

from layerprobe.cli.console import RichProgress


def test_the_bar_shows_the_last_loss_and_a_new_stage_forgets_it():
    progress = RichProgress(quiet=True)
    callbacks = progress.callbacks()
    callbacks.stage("Training LoRA", 3, "step")
    callbacks.detail("loss 0.5")
    callbacks.on_advance(1)
    callbacks.detail("loss 0.25")
    callbacks.on_advance(1)
    rate = progress.bar.tasks[progress.task].fields["rate"]
    assert rate.startswith("loss 0.25") and "step/s" in rate
    callbacks.stage("Held-out comparison", 2, "tok")
    callbacks.on_advance(1)
    assert "loss" not in progress.bar.tasks[progress.task].fields["rate"]
