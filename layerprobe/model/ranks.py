"""Many processes, one result: which share of the work this process does, and how shares come together.

`accelerate launch -m layerprobe …` or `torchrun --nproc_per_node N -m layerprobe …` start N copies of the
same command. Each holds the whole model and does a deterministic share of the work (prune-drop: a share
of the variants; angular: a share of the batches); rank 0 gathers the pieces and writes the one result.
`--shard i/N` is the same split across independent jobs (Slurm arrays, k8s indexed jobs), joined later
by `layerprobe merge`. Nothing here schedules anything: torch.distributed (through accelerate on GPUs)
carries the pieces, gloo on CPU so that tests run real ranks without a GPU.

Joining is checked: a `WORLD_SIZE` left in the environment without the rest of what a launcher sets
(`RANK`, `MASTER_ADDR`, `MASTER_PORT`) is one line and exit 2 before anything loads, and the ranks meet
within `RENDEZVOUS_SECONDS` (a stale `MASTER_ADDR` with no peer would otherwise wait forever). Leaving is
orderly: `World.finish` waits for every rank and takes the process group down, and what is still up at
exit (after an error) is taken down before the interpreter ends, so no rank dies in C++ teardown
("terminate called without an active exception", SIGABRT) after its result is written.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from layerprobe.core import RENDEZVOUS_SECONDS, LayerprobeError, Share

# Ranks that finish their share early wait for the slowest at the final gather; a prune-drop share can
# take many hours, far beyond torch's 30-minute default.
_GATHER_TIMEOUT = timedelta(days=7)
RENDEZVOUS_ENV = "LAYERPROBE_RENDEZVOUS_SECONDS"  # overrides RENDEZVOUS_SECONDS (a slow cluster, the tests)
_LAUNCH_HINT = (
    "Unset WORLD_SIZE (and RANK, LOCAL_RANK, MASTER_ADDR, MASTER_PORT) to run one process, "
    "or start the ranks with `accelerate launch` or `torchrun`."
)
_STORE: list[Any] = []  # the rendezvous store of this process's launch, kept alive until the group is down


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

    def finish(self) -> None:
        """Wait for every rank, then leave the launch: at the end of a command that succeeded on every rank."""
        if self.size > 1:
            import torch.distributed as dist

            if dist.is_initialized():
                dist.barrier()  # no rank takes the store down while another still talks to it
            leave()


def leave() -> None:
    """Take this process's process group and rendezvous store down (nothing when there are none)."""
    dist = sys.modules.get("torch.distributed")  # never imported here just to find nothing to do
    if dist is not None and dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
    _STORE.clear()


def launch_environment() -> tuple[int, int, str, int] | None:
    """(rank, size, master address, port) of the launch this process belongs to, None when not launched.

    Refuses, as one line, an environment that names a world of several processes but lacks what every
    launcher sets with it: a `WORLD_SIZE` left over in a shell is the usual cause.
    """
    text = os.environ.get("WORLD_SIZE", "").strip() or "1"
    try:
        size = int(text)
    except ValueError:
        raise LayerprobeError(f"WORLD_SIZE={text!r} is not a number of processes.", hint=_LAUNCH_HINT) from None
    if size <= 1:
        return None
    missing = [name for name in ("RANK", "MASTER_ADDR", "MASTER_PORT") if not os.environ.get(name, "").strip()]
    if missing:
        raise LayerprobeError(
            f"WORLD_SIZE={size} is set, but {', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not: "
            "this process was not started by a launcher.",
            hint=_LAUNCH_HINT,
        )
    numbers = {}
    for name in ("RANK", "LOCAL_RANK", "MASTER_PORT"):
        value = os.environ.get(name, "").strip()
        if name == "LOCAL_RANK" and not value:
            continue
        try:
            numbers[name] = int(value)
        except ValueError:
            raise LayerprobeError(f"{name}={value!r} is not a whole number.", hint=_LAUNCH_HINT) from None
    if not 0 <= numbers["RANK"] < size:
        raise LayerprobeError(
            f"RANK={numbers['RANK']} is outside WORLD_SIZE={size} (0 to {size - 1}).", hint=_LAUNCH_HINT
        )
    if numbers.get("LOCAL_RANK", 0) < 0 or not 0 < numbers["MASTER_PORT"] < 65536:
        raise LayerprobeError(
            f"LOCAL_RANK={os.environ.get('LOCAL_RANK')!r} / MASTER_PORT={numbers['MASTER_PORT']} are not valid.",
            hint=_LAUNCH_HINT,
        )
    return numbers["RANK"], size, os.environ["MASTER_ADDR"].strip(), numbers["MASTER_PORT"]


def rendezvous_timeout() -> timedelta:
    """How long the ranks wait for each other to join: RENDEZVOUS_SECONDS, or the variable that overrides it."""
    text = os.environ.get(RENDEZVOUS_ENV, "").strip()
    try:
        seconds = float(text) if text else float(RENDEZVOUS_SECONDS)
    except ValueError:
        raise LayerprobeError(f"{RENDEZVOUS_ENV}={text!r} is not a number of seconds.") from None
    if not seconds > 0:
        raise LayerprobeError(f"{RENDEZVOUS_ENV} must be a positive number of seconds, got {text}.")
    return timedelta(seconds=seconds)


def world() -> World:
    """Join the launch this process belongs to (once), or the one-process world when not launched.

    The ranks meet at a store on MASTER_ADDR:MASTER_PORT that rank 0 opens, waiting at most the
    rendezvous timeout; then the process group is built on it (NCCL with a GPU, and accelerate's
    PartialState sets this rank's device; gloo without one, since accelerate 1.x wants mpirun for CPU).
    """
    launch = launch_environment()
    if launch is None:
        return World()
    import torch
    import torch.distributed as dist

    if not dist.is_initialized():
        rank, size, address, port = launch
        store = _meet(rank, size, address, port)
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        dist.init_process_group(backend, store=store, rank=rank, world_size=size, timeout=_GATHER_TIMEOUT)
        store.set_timeout(_GATHER_TIMEOUT)  # met: from now on the slowest share sets the pace
        _STORE.append(store)
        atexit.register(leave)  # after an error too: nothing of the group is left for C++ teardown
    if torch.cuda.is_available():
        from accelerate import PartialState

        state = PartialState(timeout=_GATHER_TIMEOUT)  # finds the group up: sets this rank's device
        return World(state.process_index, state.num_processes)
    return World(dist.get_rank(), dist.get_world_size())


def _meet(rank: int, size: int, address: str, port: int) -> Any:
    """The launch's TCP store once all `size` ranks have joined it, or one line when they do not in time.

    torch's own env:// rendezvous: rank 0 opens the store (under torchrun every rank joins the agent's).
    """
    import torch.distributed as dist

    timeout = rendezvous_timeout()
    try:
        with _native_stderr_held() as held:  # c10d logs every failed connect, with a C++ stack trace
            store, _rank, _size = next(dist.rendezvous("env://", rank, size, timeout=timeout))
        sys.stderr.write("".join(held))  # met: whatever it said is shown after all
    except (RuntimeError, OSError, ValueError) as exc:  # DistStoreError / DistNetworkError are RuntimeErrors
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if rank == 0:
            what = f"the other {size - 1} rank(s) did not join at {address}:{port}"
        else:
            what = f"rank 0 could not be reached at {address}:{port}"
        raise LayerprobeError(
            f"WORLD_SIZE={size}, RANK={rank}: {what} within {timeout.total_seconds():g} s ({detail[:200]}).",
            hint=_LAUNCH_HINT + f" On a slow cluster, allow more time with {RENDEZVOUS_ENV}=120.",
        ) from None
    return store


@contextlib.contextmanager
def _native_stderr_held() -> Iterator[list[str]]:
    """While inside, what native code writes to file descriptor 2 is held back; the list then holds it."""
    said: list[str] = []
    sys.stderr.flush()
    with tempfile.TemporaryFile() as held:
        saved = os.dup(2)
        try:
            os.dup2(held.fileno(), 2)
            yield said
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            said.append(held.read().decode("utf-8", errors="replace"))
