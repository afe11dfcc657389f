"""LoRA after the linear fold never ends worse than the fold on its check set, and its schedule and split.

The check set is calibration windows LoRA never trains on; the adapters kept are those that score best on
it, the zero adapters (the start) included. With a learning rate far too high every trained state scores
worse than the start, so the healed model must be exactly the fold: its held-out numbers equal linear's.
"""

from __future__ import annotations

import math

import pytest
from factories import build_checkpoint

from layerprobe.core import BUILTIN_CORPUS, LORA_CHECK_SHARE, CorpusSpec, HealSpec, ModelSpec
from layerprobe.data import Window
from layerprobe.heal.lora import learning_rate_factor, split_check
from layerprobe.heal.run import run_heal


def _windows(n):
    return [Window(input_ids=[i, i + 1], last_text_position=1) for i in range(n)]


def test_check_set_is_every_eighth_window_and_never_trained_on():
    train, check = split_check(_windows(17))
    assert [w.input_ids[0] for w in check] == [LORA_CHECK_SHARE - 1, 2 * LORA_CHECK_SHARE - 1]
    assert len(train) == 15 and not {id(w) for w in train} & {id(w) for w in check}
    train, check = split_check(_windows(3))
    assert len(check) == 1 and len(train) == 2
    train, check = split_check(_windows(1))
    assert check == [] and len(train) == 1


def test_learning_rate_warms_up_then_decays_to_zero():
    steps = 100
    factors = [learning_rate_factor(s, steps) for s in range(steps)]
    assert factors[0] == pytest.approx(0.1) and factors[9] == pytest.approx(1.0)
    assert all(a <= b for a, b in zip(factors[:10], factors[1:10], strict=False))
    assert all(a >= b for a, b in zip(factors[10:], factors[11:], strict=False))
    assert factors[-1] == pytest.approx(0.5 * (1 + math.cos(math.pi * 89 / 90)))
    assert learning_rate_factor(0, 1) == 1.0


@pytest.mark.slow
def test_lora_that_only_hurts_keeps_the_fold(tmp_path):
    source = build_checkpoint("llama", tmp_path / "src", num_layers=4)
    common = dict(
        model=ModelSpec(str(source), device="cpu"),
        corpus=CorpusSpec(dataset=BUILTIN_CORPUS, tokens=512, seq_len=32),
        remove="2",
        held_out_tokens=256,
    )
    linear = run_heal(HealSpec(**common))
    both = run_heal(HealSpec(**common, method="linear+lora", steps=6, lr=50.0, rank=2))
    assert both.lora is not None
    check = both.lora["check"]
    assert check["windows"] == 2 and check["kept_step"] == 0
    first = check["losses"][0][1]
    assert all(not loss <= first for _, loss in check["losses"][1:]), check  # worse, or not a number
    for metric in ("nll", "kl", "top1_agreement"):
        assert both.metrics[metric]["healed"]["value"] == pytest.approx(linear.metrics[metric]["healed"]["value"])
