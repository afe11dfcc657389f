"""`layerprobe prune`: write a smaller checkpoint without the removed blocks, loadable with from_pretrained."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from layerprobe.cli.console import RichProgress, err, out
from layerprobe.cli.groups import takes_groups
from layerprobe.cli.options import Checkpoint, Dtype, ModelArg, Quiet
from layerprobe.cli.summaries import print_cut_ratios
from layerprobe.core import ExportSpec, ModelSpec, check_output_dir
from layerprobe.export import recover_destination, run_export


@takes_groups
def prune(
    model: ModelArg,
    *,
    save: Annotated[
        Path,
        typer.Option("--save", help="Directory for the pruned checkpoint (written to a temp dir, renamed at the end)."),
    ],
    remove: Annotated[
        str | None,
        typer.Option("--remove", help="Blocks to remove, all at once: 0-based inclusive ranges like 20-27,30."),
    ] = None,
    remove_attention: Annotated[
        str | None,
        typer.Option(
            "--remove-attention",
            help="Blocks whose attention sublayer to drop. Refused (before loading weights) unless the config "
            "can say a block has no attention: zeroed weights are not a smaller model.",
        ),
    ] = None,
    remove_mlp: Annotated[
        str | None,
        typer.Option("--remove-mlp", help="Blocks whose MLP sublayer to drop; refused like --remove-attention."),
    ] = None,
    from_curve: Annotated[
        Path | None,
        typer.Option(
            "--from",
            help="A prune_curve.json: remove the set --method chose for --n units (instead of --remove). A set "
            "that removes a sublayer alone is refused.",
        ),
    ] = None,
    method: Annotated[
        str | None, typer.Option("--method", help="With --from: the selection method whose set to export.")
    ] = None,
    n: Annotated[int | None, typer.Option("--n", help="With --from: the number of units that set removes.")] = None,
    overwrite: Annotated[
        bool,
        typer.Option(
            "--overwrite",
            help="Replace --save if it exists and is not empty: the old checkpoint goes only once the new one is "
            "complete, and an interrupted replacement is restored by the next run.",
        ),
    ] = False,
    mergekit_yaml: Annotated[
        Path | None,
        typer.Option(
            "--mergekit-yaml",
            help="Also write the equivalent mergekit passthrough config (slices of the kept layer ranges) here.",
        ),
    ] = None,
    max_shard_size: Annotated[
        str | None,
        typer.Option("--max-shard-size", help="Largest safetensors shard, e.g. 5GB (default: transformers' own)."),
    ] = None,
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
    spec = ExportSpec(
        model=checkpoint.spec(model, dtype, "cpu"),
        save=str(save),
        remove=remove,
        remove_attention=remove_attention,
        remove_mlp=remove_mlp,
        overwrite=overwrite,
        mergekit_yaml=str(mergekit_yaml) if mergekit_yaml else None,
        max_shard_size=max_shard_size,
        from_curve=str(from_curve) if from_curve is not None else None,
        method=method,
        n=n,
    )
    check_output_dir(save, "--save")
    if mergekit_yaml is not None:
        check_output_dir(mergekit_yaml.parent, "--mergekit-yaml")
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
