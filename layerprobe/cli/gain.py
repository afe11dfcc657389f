"""`layerprobe gain`: parameters, bytes, peak memory and prefill/decode speed of candidates against an original."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import typer
from rich.table import Table

from layerprobe.cli.console import RichProgress, out
from layerprobe.cli.groups import SpecGroup, takes_groups
from layerprobe.cli.options import ModelLoading, Output
from layerprobe.core import GainSpec, LayerprobeError, check_output_dir
from layerprobe.plots import plot_gain
from layerprobe.results import GainResult, RunDir, RunTimer, write_json


@dataclass(frozen=True)
class Timing(SpecGroup):
    """How the speed runs are shaped (declared on GainSpec)."""

    SPEC = GainSpec
    FIELDS = ("batch", "prompt_tokens", "new_tokens", "repeats", "seed")


@takes_groups
def gain(
    models: Annotated[
        list[str], typer.Argument(help="The ORIGINAL checkpoint, then one or more CANDIDATEs (dirs or hub ids).")
    ],
    *,
    timing: Timing,
    loading: ModelLoading,
    output: Output,
) -> None:
    """Measure what a smaller checkpoint buys on this machine, against the original, interleaved and repeated.

    Writes gain.json and gain.png / gain.pdf; prints each candidate's ratios (speeds: median and 25–75 % of
    the per-round ratios).
    """
    if len(models) < 2:
        raise LayerprobeError("gain needs the original and at least one candidate.", hint="layerprobe gain ORIG CAND")
    from layerprobe.heal import run_gain  # the workflow (and torch) only when the command runs

    settings = GainSpec(**timing.spec_fields())
    specs = [loading.spec(model) for model in models]
    directory = check_output_dir(output.directory(models[0]))
    timer = RunTimer()
    progress = RichProgress(output.quiet)
    with progress.running():
        progress.callbacks().stage("Timing", settings.repeats * len(models), "run")
        body = run_gain(specs, settings, progress.callbacks().on_advance)
    result = GainResult(body["settings"], body["models"], _run(timer, body))
    json_path = write_json(RunDir(directory).gain_json, result.to_dict())
    plots = plot_gain(result, directory)
    table = Table(title="÷ original (speeds: median [25–75 %])")
    for column in ("model", "parameters", "bytes", "peak memory", "prefill tok/s", "decode tok/s"):
        table.add_column(column)
    for entry in result.models[1:]:
        r = entry["ratios"]
        cells = [entry["model"]]
        for key in ("parameters", "bytes_on_disk", "peak_memory_bytes"):
            cells.append("—" if r[key] is None else f"{r[key]:.3f}")
        for key in ("prefill_tokens_per_second", "decode_tokens_per_second"):
            low, high = r[key]["spread"]
            cells.append(f"{r[key]['median']:.2f} [{low:.2f}, {high:.2f}]")
        table.add_row(*cells)
    out.print(table)
    out.print("wrote " + ", ".join(map(str, [json_path, *plots])), highlight=False, markup=False)


def _run(timer: RunTimer, body: dict[str, object]) -> dict[str, object]:
    from dataclasses import asdict

    devices = {str(m["device"]) for m in body["models"]}  # type: ignore[attr-defined]
    return asdict(timer.finish(", ".join(sorted(devices))))
