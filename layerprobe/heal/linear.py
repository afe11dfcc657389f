"""`heal --method linear`: one streamed pass of the unpruned model fits each removed span's map T (fit.py).

Per batch of calibration windows the pass records, for every removed span [start, end), the contribution c
of the block before it (fold.py says which tensor that is) and what the span adds, x^end − x^start, and
adds both to the span's normal equations; only d×d float64 sums outlive a batch. `check_fold` then replays
the block before each cut on a recorded call, with and without the fold, and refuses a fold that does not
add exactly T c: the weights found from the data flow are trusted only once they compute what was fitted.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

import numpy as np

from layerprobe.core import UnsupportedModel
from layerprobe.data import Window, batches
from layerprobe.heal.fit import NormalEquations
from layerprobe.heal.fold import FoldSite, folded
from layerprobe.model import (
    LayerStack,
    capture_block_states,
    hidden_from_input,
    hidden_from_output,
    image_only_blocks,
    takes_argument,
)

if TYPE_CHECKING:
    import torch
    from torch import nn

_FOLD_TOLERANCE = {"float32": 1e-4, "float64": 1e-8}  # relative error of the folded block; half precision: 2e-2


@contextlib.contextmanager
def recorded_contributions(stack: LayerStack, sites: Sequence[FoldSite]) -> Iterator[dict[int, torch.Tensor]]:
    """Site index → the output of its contribution module in the last forward pass (Pre-LN sites only)."""
    found: dict[int, torch.Tensor] = {}

    def keep(index: int) -> Callable[[nn.Module, object, object], None]:
        def hook(_module: nn.Module, _args: object, output: object) -> None:
            found[index] = hidden_from_output(output)

        return hook

    handles = [
        stack.blocks[site.block].get_submodule(site.contribution).register_forward_hook(keep(i))
        for i, site in enumerate(sites)
        if site.contribution is not None
    ]
    try:
        yield found
    finally:
        for handle in handles:
            handle.remove()


def contribution_and_target(
    site: FoldSite, index: int, states: list[torch.Tensor], contributions: dict[int, torch.Tensor]
) -> tuple[torch.Tensor, torch.Tensor]:
    """(c, x^end − x^start) of one site in float64, from one pass's states and contribution outputs."""
    start = states[site.start].double()
    c = contributions[index].double() if site.contribution is not None else start - states[site.block].double()
    return c, states[site.end].double().to(start.device) - start


def calibrate(
    model: nn.Module,
    stack: LayerStack,
    sites: Sequence[FoldSite],
    windows: list[Window],
    batch_size: int,
    device: torch.device | None,
    width: int,
    on_tokens: Callable[[int], None] | None = None,
) -> list[NormalEquations]:
    """One pass over the calibration windows: every site's normal equations."""
    import torch

    equations = [NormalEquations(width) for _ in sites]
    extra = {"use_cache": False} if takes_argument(model, "use_cache") else {}
    with (
        torch.inference_mode(),
        capture_block_states(stack, image_only_blocks(stack)) as states,
        recorded_contributions(stack, sites) as found,
    ):
        for group in batches(windows, batch_size):
            states.clear()
            found.clear()
            model(input_ids=torch.tensor([w.input_ids for w in group], device=device), **extra)
            for index, site in enumerate(sites):
                equations[index].add(*contribution_and_target(site, index, states, found))
            if on_tokens:
                on_tokens(sum(len(w.input_ids) for w in group))
    return equations


def check_fold(
    model: nn.Module, stack: LayerStack, sites: Sequence[FoldSite], maps: Sequence[np.ndarray], probe: torch.Tensor
) -> None:
    """Refuse a fold whose block does not output x + c + T c on a recorded call (one line naming the block)."""
    import torch

    calls: dict[int, tuple[tuple[object, ...], dict[str, object]]] = {}

    def record(index: int) -> Callable[..., None]:
        def hook(_module: nn.Module, args: tuple[object, ...], kwargs: dict[str, object]) -> None:
            calls[index] = (args, dict(kwargs))

        return hook

    extra = {"use_cache": False} if takes_argument(model, "use_cache") else {}
    handles = [stack.blocks[s.block].register_forward_pre_hook(record(s.block), with_kwargs=True) for s in sites]
    try:
        with (
            torch.no_grad(),
            capture_block_states(stack, image_only_blocks(stack)) as states,
            recorded_contributions(stack, sites) as found,
        ):
            model(input_ids=probe, **extra)
    finally:
        for handle in handles:
            handle.remove()
    for index, (site, transform) in enumerate(zip(sites, maps, strict=True)):
        c, _ = contribution_and_target(site, index, states, found)
        expected = torch.as_tensor(transform, dtype=torch.float64, device=c.device)
        expected_change = c @ expected.T
        args, kwargs = calls[site.block]
        block = stack.blocks[site.block]
        with torch.no_grad(), folded(stack, [site], [transform]):
            after = hidden_from_output(block(*args, **kwargs)).double()
        change = after - states[site.start].double().to(after.device)
        scale = float(expected_change.norm()) or 1.0
        error = float((change - expected_change.to(change.device)).norm()) / scale
        dtype = str(hidden_from_input(args, kwargs).dtype).replace("torch.", "")
        if error > _FOLD_TOLERANCE.get(dtype, 2e-2):
            raise UnsupportedModel(
                f"Folding the map into block {site.block} ({type(block).__name__}) does not add T·c to its output "
                f"(relative error {error:.2g}): its last projection is not where this architecture's output is made.",
                hint="Heal this model with --method lora.",
            )
