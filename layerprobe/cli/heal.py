"""`layerprobe heal`: remove blocks, stand in for them, and measure on held-out text how much comes back."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.markup import escape

from layerprobe.cli.console import RichProgress, err, out
from layerprobe.cli.corpus_options import Corpus
from layerprobe.cli.groups import SpecGroup, takes_groups
from layerprobe.cli.options import ModelArg, ModelLoading, OptionalTasks, Output, split_task_names
from layerprobe.cli.summaries import print_cut_ratios
from layerprobe.core import LORA_PANEL, TASKS_PANEL, HealSpec, PruneSpec, check_output_dir
from layerprobe.model import world
from layerprobe.plots import plot_heal
from layerprobe.results import HEAL_METRICS, RunDir, write_json


@dataclass(frozen=True)
class Healing(SpecGroup):
    """What to remove, how to heal it, on what, and where the healed checkpoint goes (declared on HealSpec)."""

    SPEC = HealSpec
    FIELDS = (
        "remove",
        "from_curve",
        "curve_method",
        "n",
        "method",
        "ridge",
        "held_out_tokens",
        "batch_size",
        "seed",
        "save",
        "overwrite",
    )


@dataclass(frozen=True)
class Lora(SpecGroup):
    """How `--method lora` / `linear+lora` trains its adapters (peft), and how it resumes after a kill."""

    PANEL = LORA_PANEL
    SPEC = HealSpec
    REST_OF = (Healing,)  # every other HealSpec setting: a new LoRA setting is an option at once


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
    healing: Healing,
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
        **healing.spec_fields(),
        **lora.spec_fields(),
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
