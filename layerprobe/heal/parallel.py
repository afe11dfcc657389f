"""`heal` on the processes of an `accelerate launch`: one set of adapters, trained data-parallel.

Every rank holds the whole model (teacher and student are one model, as in lora.py) and trains the same
adapters on its share of each step's windows: `--batch-size` stays the global batch, split round-robin
among the ranks, so a step sees the same windows whatever the number of processes. accelerate's
`Accelerator.prepare` wraps the student in DistributedDataParallel, whose all-reduce averages the ranks'
gradients; each rank's loss is weighted by its share of the step's windows so that the average is the
gradient of the global batch's mean loss, as one process computes it. The linear fold is computed on rank 0's
terms and broadcast, so every rank starts from the same weights. Refused in one line before any weight
loads: what cannot hold a whole model per rank (`--device-map`), a device that pins every rank to one place,
and launches configured for FSDP or DeepSpeed (heal's in-place teacher/student swap needs plain DDP).
"""

from __future__ import annotations

import os
import warnings
from typing import TYPE_CHECKING, Any, TypeVar

from layerprobe.core import LayerprobeError

if TYPE_CHECKING:
    import torch
    from torch import nn

    from layerprobe.core import HealSpec
    from layerprobe.model import World

T = TypeVar("T")
_SHARDED = ("ACCELERATE_USE_FSDP", "ACCELERATE_USE_DEEPSPEED")


def check_launch(spec: HealSpec, world: World) -> None:
    """Refuse, before any weight loads, what cannot run with several processes each holding the whole model."""
    if world.size == 1:
        return
    if spec.model.device_map is not None:
        raise LayerprobeError(
            f"--device-map {spec.model.device_map} splits one model over devices; under a launch of {world.size} "
            "processes each rank holds the whole model.",
            hint="Drop --device-map (each rank loads the model on its own GPU), or run one process with --device-map.",
        )
    import torch

    if torch.cuda.is_available() and spec.model.device not in ("auto", "cuda"):
        raise LayerprobeError(
            f"--device {spec.model.device} puts every rank of the launch on one device.",
            hint="Drop --device: each rank trains on its own GPU (LOCAL_RANK).",
        )
    for name in _SHARDED:
        if os.environ.get(name, "").strip().lower() == "true":
            raise LayerprobeError(
                f"This launch is configured for {name.split('_')[-1]}; heal trains its adapters data-parallel (DDP).",
                hint="Launch with `accelerate launch --multi_gpu --num_processes N`.",
            )


class DataParallel:
    """The ranks of a launch training one set of adapters; with one process nothing is wrapped or reduced."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.accelerator: Any = None
        self.trainable: list[torch.nn.Parameter] = []
        if world.size > 1:
            import torch
            from accelerate import Accelerator, DistributedDataParallelKwargs

            ddp = DistributedDataParallelKwargs(find_unused_parameters=False, broadcast_buffers=False)
            with warnings.catch_warnings():  # accelerate's notes on thread counts and launch settings
                warnings.simplefilter("ignore")
                self.accelerator = Accelerator(
                    cpu=not torch.cuda.is_available(),
                    device_placement=False,  # the model is where load_model put it: this rank's GPU
                    mixed_precision="no",  # heal computes in --dtype; a launch's --mixed_precision is not used
                    dynamo_backend="no",
                    kwargs_handlers=[ddp],
                )

    def prepare(self, model: nn.Module, optimiser: torch.optim.Optimizer) -> tuple[nn.Module, Any]:
        """The module whose forward trains (DDP over the ranks), and the optimiser that steps it."""
        if self.accelerator is None:
            return model, optimiser
        self.trainable = [p for p in model.parameters() if p.requires_grad]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            wrapped, stepped = self.accelerator.prepare(model, optimiser)
        return wrapped, stepped

    def backward(self, loss: torch.Tensor) -> None:
        """Gradients of `loss`; under a launch every adapter takes part (a zero term for an expert no window used).

        DDP all-reduces one bucket of gradients per step and waits for every trainable parameter; a MoE expert
        that routes none of a rank's windows would leave it waiting (find_unused_parameters would instead walk
        the graph every step, and say so on stderr). A dense model's gradients are unchanged: the term is 0.
        """
        if self.accelerator is None:
            loss.backward()
        else:
            self.accelerator.backward(loss + sum(p.sum() for p in self.trainable) * 0.0)

    def total(self, value: torch.Tensor) -> float:
        """The sum of a scalar over the ranks (the same float on every rank)."""
        if self.accelerator is None:
            return float(value)
        from accelerate.utils import reduce

        return float(reduce(value.detach().reshape(1).to(self.accelerator.device), "sum"))

    def from_main(self, value: T) -> T:
        """Rank 0's `value` on every rank (pickled): what must start identical everywhere."""
        if self.accelerator is None:
            return value
        from accelerate.utils import broadcast_object_list

        box: list[Any] = [value if self.world.is_main else None]
        broadcast_object_list(box, from_process=0)
        return box[0]

    def release(self) -> None:
        """Drop the DDP wrapper and the prepared optimiser (the model itself is given back untouched)."""
        if self.accelerator is not None:
            self.accelerator.free_memory()
