"""`layerprobe merge`: join the shards of one `prune-drop --shard i/N` run into one prune_drop.json."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from layerprobe.cli.options import Quiet, hold_out
from layerprobe.cli.prune_drop import report_prune_drop
from layerprobe.core import check_output_dir


def merge(
    shards: Annotated[list[Path], typer.Argument(help="The --out folders (or shard files) of `prune-drop --shard`.")],
    out_dir: Annotated[Path, typer.Option("--out", help="Where to write the joined prune_drop.json.")],
    quiet: Quiet = False,
) -> None:
    """Join the shards of one `prune-drop --shard i/N` run into the prune_drop.json an unsharded run writes."""
    from layerprobe.prune import merge_shards  # lm-eval: only once a run starts

    hold_out(check_output_dir(out_dir))
    report_prune_drop(merge_shards(list(shards), out_dir), out_dir)
