"""`layerprobe heal`: remove blocks, stand in for them, and measure on held-out text how much comes back."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from layerprobe.cli.console import RichProgress, err, out
from layerprobe.cli.corpus_options import Corpus
from layerprobe.cli.groups import OptionGroup, SpecGroup, takes_groups
from layerprobe.cli.options import ModelArg, ModelLoading, OptionalTasks, Output, split_task_names
from layerprobe.cli.summaries import print_cut_ratios
from layerprobe.core import TASKS_PANEL, HealSpec, PruneSpec, check_output_dir
from layerprobe.model import world
from layerprobe.plots import plot_heal
from layerprobe.results import HEAL_METRICS, RunDir, write_json


@dataclass(frozen=True)
class Lora(OptionGroup):
    """How `--method lora` / `linear+lora` trains its adapters (peft), and how it resumes after a kill."""

    PANEL = "LoRA (--method lora, linear+lora)"

    loss: Annotated[
        str, typer.Option("--loss", help="LoRA's objective: kl (to the unpruned model's distribution) or nll.")
    ] = HealSpec.loss
    rank: Annotated[int, typer.Option("--rank", help="LoRA rank.")] = HealSpec.rank
    targets: Annotated[str, typer.Option("--targets", help="LoRA target modules, comma-separated, or all-linear.")] = (
        HealSpec.targets
    )
    steps: Annotated[int, typer.Option("--steps", help="LoRA optimiser steps.")] = HealSpec.steps
    lr: Annotated[float, typer.Option("--lr", help="LoRA learning rate.")] = HealSpec.lr
    checkpoint_every: Annotated[
        int, typer.Option("--checkpoint-every", help="LoRA steps between two resumable checkpoints in --out.")
    ] = HealSpec.checkpoint_every
    resume: Annotated[
        bool, typer.Option("--resume", help="Continue LoRA training from the checkpoint in --out after a kill.")
    ] = False


@dataclass(frozen=True)
class HealTaskScoring(SpecGroup):
    """How `--task` is scored on the original, pruned and healed model: prune-drop's settings, declared once."""

    PANEL = TASKS_PANEL
    SPEC = PruneSpec
    FIELDS = ("limit", "num_fewshot", "include_path", "trust_task_code")


@takes_groups
def heal(
    model: ModelArg,
    *,
    remove: Annotated[
        str | None, typer.Option("--remove", help="Blocks to remove: 0-based inclusive ranges like 20-27,30.")
    ] = None,
    from_curve: Annotated[
        Path | None,
        typer.Option("--from", help="A prune_curve.json: remove the set --curve-method chose for --n blocks."),
    ] = None,
    curve_method: Annotated[
        str, typer.Option("--curve-method", help="With --from: the selection method whose set to remove.")
    ] = "angular",
    n: Annotated[int | None, typer.Option("--n", help="With --from: the number of blocks that set removes.")] = None,
    method: Annotated[
        str,
        typer.Option(
            "--method",
            help="linear: fit one least-squares map per removed span and fold it into the block before the cut "
            "(no training); lora: LoRA adapters trained to match the unpruned model; linear+lora: both.",
        ),
    ] = HealSpec.method,
    ridge: Annotated[
        float,
        typer.Option("--ridge", help="Ridge term λ of the linear fit, relative to the data's scale (0: plain lstsq)."),
    ] = HealSpec.ridge,
    held_out_tokens: Annotated[
        int,
        typer.Option(
            "--held-out-tokens", help="Positions after the calibration windows on which the three models are compared."
        ),
    ] = HealSpec.held_out_tokens,
    batch_size: Annotated[int, typer.Option("--batch-size", help="Windows per forward pass.")] = HealSpec.batch_size,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the recovery bootstrap and of LoRA.")] = HealSpec.seed,
    save: Annotated[
        Path | None,
        typer.Option("--save", help="Directory for the healed checkpoint (staged, then moved into place, like prune)."),
    ] = None,
    overwrite: Annotated[
        bool, typer.Option("--overwrite", help="Replace --save if it exists (the old one goes only at the end).")
    ] = False,
    lora: Lora,
    task: OptionalTasks = None,
    scoring: HealTaskScoring,
    corpus: Corpus,
    loading: ModelLoading,
    output: Output,
) -> None:
    """Remove blocks and heal the cut; compare original, pruned and healed on held-out text.

    The calibration windows are the first --tokens positions of the corpus, the held-out windows the next
    --held-out-tokens. Writes heal.json and heal.png / heal.pdf; with --save, the healed checkpoint, which has
    exactly prune's architecture and loads with from_pretrained.
    """
    spec = HealSpec(
        model=loading.spec(model),
        corpus=corpus.spec(),
        remove=remove,
        from_curve=str(from_curve) if from_curve is not None else None,
        curve_method=curve_method,
        n=n,
        method=method,
        ridge=ridge,
        held_out_tokens=held_out_tokens,
        batch_size=batch_size,
        seed=seed,
        save=str(save) if save is not None else None,
        overwrite=overwrite,
        loss=lora.loss,
        rank=lora.rank,
        targets=lora.targets,
        steps=lora.steps,
        lr=lora.lr,
        checkpoint_every=lora.checkpoint_every,
        resume=lora.resume,
        tasks=split_task_names(task or []),
        **scoring.spec_fields(),
    )
    directory = output.directory(model)
    check_output_dir(directory)
    from layerprobe.heal import run_heal  # the workflow (and torch) only when the command runs

    ranks = world()  # under `accelerate launch`: every rank trains, the main rank alone measures and writes
    progress = RichProgress(output.quiet or not ranks.is_main, notes=ranks.is_main)
    with progress.running():
        result = run_heal(spec, progress.callbacks(), RunDir(directory).heal_checkpoint, ranks)
    ranks.finish()  # every rank done: leave the launch together (no rank dies in teardown)
    if result is None:  # another rank than the main one: quiet
        return
    json_path = write_json(RunDir(directory).heal_json, result.to_dict())
    plots = plot_heal(result, directory)
    lines = [(metric, result.metrics[metric]) for metric in HEAL_METRICS]
    lines += [
        (f"{name} {metric}", entry)
        for name, rec in (result.tasks or {}).items()
        for metric, entry in rec["metrics"].items()
    ]
    for label, entry in lines:  # the held-out metrics, then each task's
        out.print(
            f"{label}: original {entry['original']['value']:.4g}, pruned {entry['pruned']['value']:.4g}, "
            f"healed {entry['healed']['value']:.4g}; {recovery_text(entry['recovery'])}",
            highlight=False,
            markup=False,
        )
    print_cut_ratios(model, result.checkpoint, result.parameters["original"], result.parameters["healed"])
    for note in result.notes:
        err.print(f"[yellow]note:[/] {escape(note)}", highlight=False, soft_wrap=True)
    written = [json_path, *plots] + ([Path(result.checkpoint)] if result.checkpoint else [])
    out.print("wrote " + ", ".join(map(str, written)), highlight=False, markup=False)


def recovery_text(rec: dict[str, Any]) -> str:
    """`recovery 52.3% [43.3%, 60.3%]`, or `recovery not defined`."""
    if rec["value"] is None:
        return "recovery not defined"
    return f"recovery {rec['value']:.1%} [{rec['ci95'][0]:.1%}, {rec['ci95'][1]:.1%}]"
