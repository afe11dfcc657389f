"""Many processes, one result: which share of the work this process does, and how shares come together.

`accelerate launch -m layerprobe …` or `torchrun --nproc_per_node N -m layerprobe …` start N copies of the
same command. Each holds the whole model and does a deterministic share of the work (prune-drop: a share
of the variants; angular: a share of the batches); rank 0 gathers the pieces and writes the one result.
`--shard i/N` is the same split across independent jobs (Slurm arrays, k8s indexed jobs), joined later
by `layerprobe merge`. Nothing here schedules anything: torch.distributed (through accelerate on GPUs)
carries the pieces, gloo on CPU so that tests run real ranks without a GPU.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from layerprobe.core import Share

# Ranks that finish their share early wait for the slowest at the final gather; a prune-drop share can
# take many hours, far beyond torch's 30-minute default.
_GATHER_TIMEOUT = timedelta(days=7)


@dataclass(frozen=True)
class World:
    """This process's place among the processes of one launch (rank 0 of 1 when not launched)."""

    rank: int = 0
    size: int = 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def share(self) -> Share:
        return Share(self.rank, self.size)

    def gather(self, value: object) -> list[Any]:
        """Every rank's `value`, in rank order, on every rank (pickled; small things only)."""
        if self.size == 1:
            return [value]
        import torch.distributed as dist

        gathered: list[object] = [None] * self.size
        dist.all_gather_object(gathered, value)
        return gathered

    def barrier(self) -> None:
        if self.size > 1:
            import torch.distributed as dist

            dist.barrier()


def world() -> World:
    """Join the launch this process belongs to (once), or the one-process world when not launched.

    With a GPU, accelerate's PartialState sets up NCCL and this rank's device. Without one it would
    leave the ranks unconnected (accelerate 1.x wants mpirun for CPU), so gloo is started here.
    """
    size = int(os.environ.get("WORLD_SIZE", "1"))
    if size <= 1:
        return World()
    import torch
    import torch.distributed as dist

    if torch.cuda.is_available():
        from accelerate import PartialState

        state = PartialState(timeout=_GATHER_TIMEOUT)
        return World(state.process_index, state.num_processes)
    if not dist.is_initialized():
        dist.init_process_group("gloo", timeout=_GATHER_TIMEOUT)
    return World(dist.get_rank(), dist.get_world_size())
