"""Every option more than one command takes, declared once, and the groups the commands take them in.

Options shared one by one (the MODEL argument, `--revision`, `--trust-remote-code`, `--layers-path`,
`--quiet`, `--task`) are `Annotated` aliases; options that travel together are `OptionGroup`s
(groups.py), whose methods turn them into core's specs. Defaults come from those specs where they have
one; the settings a spec declares itself (`Evaluation`, `Sequential`, `StateMemory`) are `SpecGroup`s,
whose options are built from those declarations. lm-eval's underscore spellings (`--num_fewshot`,
`--batch_size`, `--include_path`, `--output_path`, `--tasks`) are aliases wherever the option exists.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import typer

from layerprobe.cli.groups import OptionGroup, SpecGroup
from layerprobe.core import (
    DTYPES,
    LOADING_PANEL,
    OUTPUT_PANEL,
    SCALE_PANEL,
    STATISTICS_PANEL,
    TASKS_PANEL,
    AngularSpec,
    ModelSpec,
    PruneSpec,
    check_output_dir,
    declared,
)
from layerprobe.results import ALIGNS, ORDERS, hold_run_dir, rank_suffix

if TYPE_CHECKING:  # mypy reads a choice as the str it is; Typer lists and checks the Literal's values
    Dtype = str
    Order = str
    Align = str
else:
    Dtype = Literal[DTYPES]
    Order = Literal[ORDERS]
    Align = Literal[ALIGNS]

# --- options shared one by one ------------------------------------------------------------------------

ModelArg = Annotated[str, typer.Argument(help="Hub id (org/name) or local checkpoint directory.")]
Quiet = Annotated[
    bool, typer.Option("--quiet", "-q", help="No progress bars (results still print).", rich_help_panel=OUTPUT_PANEL)
]
_TASK_OPTION = typer.Option(
    "--task",
    "--tasks",
    rich_help_panel=TASKS_PANEL,
    help="lm-eval task or group (mmlu, arc_easy, a task under --include-path, a task YAML path), "
    "squad for extractive-QA models, or corpus (task-free NLL/KL/top-1 agreement on the --dataset "
    "windows; an encoder or tower: by the head it ships, masked tokens, class logits, else the pooled "
    "output). Repeat, or separate with commas (--tasks a,b), for several.",
)
Tasks = Annotated[list[str], _TASK_OPTION]
OptionalTasks = Annotated[list[str] | None, _TASK_OPTION]  # heal: tasks are scored only when given


def split_task_names(values: list[str]) -> tuple[str, ...]:
    """--task a,b --task c (lm-eval's comma lists, repeated or not) → ("a", "b", "c")."""
    return tuple(name.strip() for value in values for name in value.split(",") if name.strip())


# --- loading a model ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Checkpoint(SpecGroup):
    """Which checkpoint and how its blocks are found, for commands that read it their own way (`layers`, `prune`).

    The declarations of `ModelLoading`'s options; those commands take no device, quantization or
    `--model-args` (layers reads no weight; prune writes on CPU in the checkpoint's own dtype).
    """

    PANEL = LOADING_PANEL
    SPEC = ModelSpec
    FIELDS = ("revision", "trust_remote_code", "layers_path")

    def spec(self, model: str, dtype: str = ModelSpec.dtype, device: str = ModelSpec.device) -> ModelSpec:
        """The ModelSpec of `model` read with these options (and `dtype` / `device` where the command sets them)."""
        return ModelSpec(model, dtype=dtype, device=device, **self.spec_fields())


@dataclass(frozen=True)
class ModelLoading(SpecGroup):
    """How every command that runs a model loads it (`angular`, `depth`, `prune-drop`, `prune-curve`, …)."""

    PANEL = LOADING_PANEL
    SPEC = ModelSpec
    FIELDS = tuple(declared(ModelSpec))  # every loading setting, in the order ModelSpec declares them

    def spec(self, model: str) -> ModelSpec:
        """The ModelSpec of `model` loaded with these options (checked there: one home for the rules)."""
        return ModelSpec(model, **self.spec_fields())


# --- tasks and their evaluation -----------------------------------------------------------------------


@dataclass(frozen=True)
class Evaluation(SpecGroup):
    """How the tasks are scored (`prune-drop`, `prune-curve`), with lm-eval's spellings as aliases."""

    PANEL = TASKS_PANEL
    SPEC = PruneSpec
    FIELDS = ("limit", "num_fewshot", "batch_size", "seed", "include_path", "squad_data", "trust_task_code")


@dataclass(frozen=True)
class Sequential(SpecGroup):
    """Sequential scoring (`--precision`, `--round-size`): `prune-drop`, `prune-curve`."""

    PANEL = STATISTICS_PANEL
    SPEC = PruneSpec
    FIELDS = ("precision", "round_size")


@dataclass(frozen=True)
class StateMemory(SpecGroup):
    """`--max-state-memory` of `angular` (declared once with prune-drop's: core.run_specs.MAX_STATE_MEMORY)."""

    PANEL = SCALE_PANEL
    SPEC = AngularSpec
    FIELDS = ("max_state_bytes",)


# --- where results go ---------------------------------------------------------------------------------


def model_slug(model: str) -> str:
    """A directory name for a model id or path: `meta-llama/Llama-2-7b-hf` → `meta-llama__Llama-2-7b-hf`."""
    path = Path(model)
    name = path.name if path.exists() else model.replace("/", "__")
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name) or "model"


@dataclass(frozen=True)
class Output(OptionGroup):
    """Where a run writes and whether it shows progress (`angular`, `depth`, `prune-drop`, `prune-curve`)."""

    PANEL = OUTPUT_PANEL

    out: Annotated[
        Path | None,
        typer.Option("--out", "--output_path", help="Output directory (default: ./layerprobe-out/<model>/)."),
    ] = None
    quiet: Quiet = False

    def directory(self, model: str) -> Path:
        """`--out` if given, else ./layerprobe-out/<model-slug>/, locked for this run (`hold_out`).

        An existing file there, or another run writing there, is refused at once.
        """
        return hold_out(
            check_output_dir(self.out if self.out is not None else Path("layerprobe-out") / model_slug(model))
        )


def hold_out(directory: Path) -> Path:
    """Lock a run directory for this command (results/lock.py; released when the command ends), or refuse.

    In a multi-process launch each rank holds its own lock (the launcher's RANK and WORLD_SIZE name it).
    """
    try:
        rank, size = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:  # refused with its own line where the launch is joined
        rank, size = 0, 1
    hold_run_dir(directory, rank_suffix(rank, size) if size > 1 and 0 <= rank < size else "")
    return directory


# --- several runs read back (`track`, `report`) -------------------------------------------------------

RunDirs = Annotated[
    list[Path],
    typer.Argument(
        help="Run directories: the --out of angular, prune-drop, depth or prune-curve (whichever results each holds).",
        metavar="RUN_DIR",
        show_default=False,
    ),
]


@dataclass(frozen=True)
class History(OptionGroup):
    """Which runs belong together, in what order, and which blocks' ΔP to follow (`track`, `report`)."""

    PANEL = "Runs"

    order: Annotated[
        Order,
        typer.Option(
            "--order",
            help="step: by the training step in each run's revision (step-1000, step_2000, checkpoint-3000, "
            "ckpt-N, iter-N), else in its checkpoint directory's name; runs without one keep the given order. "
            "given: as given.",
        ),
    ] = "step"
    align: Annotated[
        Align,
        typer.Option(
            "--align",
            help="block: runs must have the same number of blocks. relative: each run's per-block series at "
            "relative depth (l + 0.5) / L, for runs of different depths.",
        ),
    ] = "block"
    allow_mixed: Annotated[
        bool,
        typer.Option(
            "--allow-mixed",
            help="Track runs of different models too (by default runs must share the model id, or be sibling "
            "checkpoint directories of one training run).",
        ),
    ] = False
    watch: Annotated[
        str | None,
        typer.Option(
            "--watch",
            help="Blocks whose ΔP to follow, e.g. 3,5 or 2-4 (blocks of the first run with a prune_drop.json). "
            "Default: each task's most harmful block in that run.",
        ),
    ] = None
