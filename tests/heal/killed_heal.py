"""`layerprobe heal` that dies (os._exit, as a kill leaves it) when LoRA is about to take step KILL_AT_STEP (0-based).

accelerate launch … tests/heal/killed_heal.py heal MODEL … (tests/heal/test_launch.py)
"""

from __future__ import annotations

import os
import runpy
import sys

import layerprobe.heal.lora as lora

_real = lora.learning_rate_factor


def _dying(step: int, steps: int) -> float:
    if step == int(os.environ["KILL_AT_STEP"]):
        os._exit(3)
    return _real(step, steps)


lora.learning_rate_factor = _dying
sys.argv = ["layerprobe", *sys.argv[1:]]
runpy.run_module("layerprobe", run_name="__main__")
