"""`layerprobe layers`: the block stack layerprobe finds in a checkpoint, read without its weights."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from layerprobe.cli.console import StageSpinner, err, out
from layerprobe.cli.groups import takes_groups
from layerprobe.cli.options import Checkpoint, ModelArg, Quiet
from layerprobe.model import StackDescription, describe_stack


@takes_groups
def layers(
    model: ModelArg,
    *,
    checkpoint: Checkpoint,
    placement: Annotated[
        bool,
        typer.Option(
            "--placement/--no-placement",
            help="Trace each block's norm placement (random weights, one block in memory at a time).",
        ),
    ] = True,
    quiet: Quiet = False,
) -> None:
    """Show the block stack layerprobe finds: its path, L, block class, parameters, norm placement, sublayers.

    Only the config is downloaded: the model is built without weights. Norm placement is traced with
    random weights, one block in memory at a time (--no-placement skips it).
    """
    spec = checkpoint.spec(model)
    spinner = StageSpinner()
    with spinner.running():
        stack = describe_stack(spec, placement, None if quiet else spinner.callbacks())
    if stack.placement_error is not None:
        err.print(f"[yellow]warning:[/] norm placement not traced: {escape(stack.placement_error)}", highlight=False)
    print_stack(model, stack)


def print_stack(model: str, stack: StackDescription) -> None:
    """The heading, one table row per block (with the traced sublayers prune-drop --unit zeroes), the totals."""
    traced = stack.placement
    out.print(f"[bold]{escape(model)}[/]: {escape(f'{stack.architecture} ({stack.kind})')}", highlight=False)
    table = Table()
    table.add_column("block", justify="right")
    table.add_column("class")
    table.add_column("parameters", justify="right")
    if traced is not None:
        table.add_column("placement")
        table.add_column("attention")  # the modules prune-drop --unit attention / mlp zero, found by tracing
        table.add_column("mlp")
    for index, (block_class, size) in enumerate(zip(stack.block_classes, stack.parameters, strict=True)):
        row = [str(index), block_class, f"{size:,}"]
        if traced is not None:
            placed = traced.blocks[index]
            row += [traced.labels[index], *(s.module if s else "?" for s in (placed.attention, placed.mlp))]
        table.add_row(*row)
    out.print(table)
    if traced is not None:
        out.print(f"placement: {escape(traced.summary)}", highlight=False)
    out.print(
        f"stack path: {escape(stack.path)} ({stack.role} stack)   L = {stack.num_layers}   "
        f"block class: {stack.block_class}   parameters in blocks: {sum(stack.parameters):,}",
        highlight=False,
    )
    if stack.side:
        out.print(f"{stack.side} stack of an encoder-decoder; {escape(stack.other_side or '')}", highlight=False)
    if stack.other_stacks:
        out.print(f"vision stacks (--layers-path): {escape(', '.join(stack.other_stacks))}", highlight=False)
