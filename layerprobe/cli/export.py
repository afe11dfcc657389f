"""`layerprobe prune`: write a smaller checkpoint without the removed blocks, loadable with from_pretrained."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from layerprobe.cli.console import RichProgress, err, out
from layerprobe.cli.groups import SpecGroup, takes_groups
from layerprobe.cli.options import Checkpoint, Dtype, ModelArg, Quiet
from layerprobe.cli.summaries import print_cut_ratios
from layerprobe.core import ExportSpec, ModelSpec, check_output_dir
from layerprobe.export import recover_destination, run_export


@dataclass(frozen=True)
class Removal(SpecGroup):
    """What `prune` removes and where it writes (ExportSpec), in the order --help lists them."""

    SPEC = ExportSpec
    FIELDS = (
        "save",
        "remove",
        "remove_attention",
        "remove_mlp",
        "from_curve",
        "method",
        "n",
        "overwrite",
        "mergekit_yaml",
        "max_shard_size",
    )


@takes_groups
def prune(
    model: ModelArg,
    *,
    removal: Removal,
    checkpoint: Checkpoint,
    dtype: Annotated[Dtype, typer.Option("--dtype", help="auto: keep the checkpoint's own dtype.")] = ModelSpec.dtype,
    quiet: Quiet = False,
) -> None:
    """Write a smaller checkpoint without the removed blocks, loadable with from_pretrained.

    The weights are those of the in-memory removal prune-drop measures (and of a mergekit passthrough
    of the kept layers). The config is rewritten for the kept blocks (num_hidden_layers, layer_types,
    MoE and sliding-window patterns) and every rebuilt block is checked against the original before any
    weight is read; the tokenizer and generation config are copied, and layerprobe.json records what was
    removed from which source. Runs on CPU; needs memory for the full model.
    """
    spec = ExportSpec(model=checkpoint.spec(model, dtype, "cpu"), **removal.spec_fields())
    check_output_dir(Path(spec.save), "--save")
    if spec.mergekit_yaml is not None:
        check_output_dir(Path(spec.mergekit_yaml).parent, "--mergekit-yaml")
    for note in recover_destination(spec):  # before anything else can refuse: the user learns it either way
        err.print(f"[yellow]note:[/] {escape(note)}", highlight=False, soft_wrap=True)
    progress = RichProgress(quiet)
    with progress.running():
        result = run_export(spec, progress.callbacks())
    before, after = len(result.removed) + len(result.kept), len(result.kept)
    changed = ", ".join(f"{k}={v}" for k, v in result.config_changes.items())
    heading = model if result.stack is None else f"{model} · {result.stack}"  # an encoder-decoder's side named
    out.print(
        f"[bold]{escape(heading)}[/]: {before} → {after} blocks (removed {', '.join(map(str, result.removed))}), "
        f"{result.parameters_before:,} → {result.parameters_after:,} parameters; config: {escape(changed)}",
        highlight=False,
        soft_wrap=True,
    )
    print_cut_ratios(model, str(result.directory), result.parameters_before, result.parameters_after)
    for note in result.notes:
        err.print(f"[yellow]note:[/] {escape(note)}", highlight=False, soft_wrap=True)
    written = f"wrote {result.directory}" + (f", {result.mergekit_yaml}" if result.mergekit_yaml else "")
    out.print(written, highlight=False, markup=False)
