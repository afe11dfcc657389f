"""`layerprobe heal`: remove blocks, stand in for them, measure what came back on held-out text, save.

Order of work, cheapest first: the options (HealSpec), the blocks to remove against a weightless
skeleton, the save destination, and every calibration and held-out window are checked before any
weight is read. Then one load of the unpruned model serves everything: the fit (linear.py, one
streamed pass), the held-out comparison of the three models (held_out.py: the pruned and the healed
model are the same weights with blocks taken out, and folded, in memory), and the export (the export
room writes the pruned checkpoint with the healed weights, staged and moved into place).
"""

from __future__ import annotations

import dataclasses
import time
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from layerprobe.core import (
    DEFAULT_DRAWS,
    OMITTED,
    CorpusError,
    ExportSpec,
    HealSpec,
    LayerprobeError,
    UnsupportedModel,
    parse_layer_ranges,
)
from layerprobe.data import Window, windows_before_loading
from layerprobe.evaluate import PreparedTasks
from layerprobe.export import build_skeleton, check_destination, model_class_for, recover_destination, run_export
from layerprobe.heal.fold import (
    FoldSite,
    find_sites,
    folded_values,
    hidden_width,
    refuse_first_block,
    refuse_streams,
    spans_of,
)
from layerprobe.heal.held_out import per_window, summarise
from layerprobe.heal.linear import calibrate, check_fold
from layerprobe.heal.lora import replaced, train_lora
from layerprobe.heal.parallel import DataParallel, check_launch
from layerprobe.heal.tasks import check_heal_tasks, score_tasks
from layerprobe.model import (
    CAUSAL_LM,
    LayerStack,
    Progress,
    World,
    blocks_text,
    check_loadable,
    find_layers,
    image_only_blocks,
    load_config,
    load_model,
    load_skeleton,
    model_info,
    model_kind,
    removed_blocks,
    spans_text,
)
from layerprobe.results import HealResult, RunTimer, read_curve_set

_PROBE_POSITIONS = 32  # positions of the probe pass that finds the fold sites and checks each fold


@dataclass
class Plan:
    """What was settled before any weight loads: the blocks removed and the two sets of windows."""

    num_layers: int
    removed: list[int]
    calibration: list[Window]
    held_out: list[Window]
    seq_len: int
    tokenizer: object = field(repr=False)
    tasks: PreparedTasks | None = field(default=None, repr=False)  # --task: built before any weight


def plan(spec: HealSpec, progress: Progress, world: World | None = None) -> Plan:
    """Every cheap check: blocks, destination, corpus (calibration + held-out), in one-line errors.

    Under a launch every rank checks everything; only the main rank recovers a killed export's destination.
    """
    world = world or World()
    check_launch(spec, world)
    check_loadable(spec.model, progress.note)
    skeleton, _, kind = load_skeleton(spec.model)
    if kind != CAUSAL_LM:
        raise UnsupportedModel(
            f"heal compares next-token distributions; {spec.model.model} is a {kind} model.",
            hint="Heal a causal language model.",
        )
    stack = find_layers(skeleton, spec.model.layers_path)
    num_layers, absent = stack.num_layers, image_only_blocks(stack)
    removed = _removed(spec, num_layers)
    refuse_image_only(stack, removed)
    prepared = check_heal_tasks(spec)
    if spec.trains:
        check_peft()
    if spec.folds:
        refuse_streams(stack)
        refuse_first_block(removed, absent)
    del skeleton, stack
    if spec.save is not None:
        if world.is_main:
            for note in recover_destination(export_spec(spec)):
                progress.note(note)
        world.barrier()  # recovered before any rank looks at the destination
        check_destination(export_spec(spec))
    total = dataclasses.replace(spec.corpus, tokens=spec.corpus.tokens + spec.held_out_tokens)
    try:
        tokenizer, windows, seq_len = windows_before_loading(spec.model, total, progress.on_advance)
    except CorpusError as exc:  # the budget is calibration plus held-out: say so, not --tokens alone
        raise CorpusError(
            f"{exc.message} (heal reads --tokens {spec.corpus.tokens:,} + --held-out-tokens "
            f"{spec.held_out_tokens:,} positions)",
            hint="Give a larger corpus, or lower --tokens or --held-out-tokens.",
        ) from exc
    calibration, held_out = split_windows(windows, spec.corpus.tokens)
    if not held_out:
        raise CorpusError(
            f"The corpus holds {sum(len(w.input_ids) for w in windows):,} positions, not --tokens "
            f"{spec.corpus.tokens:,} + --held-out-tokens {spec.held_out_tokens:,}.",
            hint="Use a larger corpus, or fewer --tokens / --held-out-tokens.",
        )
    return Plan(num_layers, removed, calibration, held_out, seq_len, tokenizer, prepared)


def split_windows(windows: list[Window], calibration_tokens: int) -> tuple[list[Window], list[Window]]:
    """The first windows holding at least `calibration_tokens` positions, and the rest (held out)."""
    seen = 0
    for index, window in enumerate(windows):
        if seen >= calibration_tokens:
            return windows[:index], windows[index:]
        seen += len(window.input_ids)
    return windows, []


def _removed(spec: HealSpec, num_layers: int) -> list[int]:
    if spec.from_curve is not None:
        chosen = read_curve_set(Path(spec.from_curve).expanduser(), spec.curve_method or "angular", spec.n or 0)
        if chosen.sublayers:
            raise UnsupportedModel(
                f"The {chosen.method} set for n = {chosen.n} removes sublayers; heal removes whole blocks.",
                hint="Pick a method whose sets are whole blocks.",
            )
        if chosen.num_layers != num_layers:
            raise LayerprobeError(
                f"{chosen.source} was measured on a model of {chosen.num_layers} blocks; this one has {num_layers}.",
                hint="Heal the model the curve was measured on.",
            )
        removed = sorted(chosen.blocks)
    else:
        removed = parse_layer_ranges(spec.remove or "", num_layers, "--remove")
    if not removed:
        raise LayerprobeError("Nothing to remove.", hint="Pass --remove 20-27, or --from prune_curve.json --n K.")
    if len(removed) == num_layers:
        raise LayerprobeError(f"Removing {len(removed)} of {num_layers} blocks removes all.", hint="Keep at least one.")
    return removed


def refuse_image_only(stack: LayerStack, removed: list[int]) -> None:
    """Removing a block that runs only with an image (mllama's cross-attention) is refused before any weight.

    heal fits and measures on text, where such a block never runs: removing it changes nothing there, so
    there is nothing to heal and nothing heal could measure about what the cut costs with an image.
    """
    chosen = sorted(set(removed) & set(image_only_blocks(stack)))
    if not chosen:
        return
    rest = [i for i in removed if i not in chosen]
    one = len(chosen) == 1
    raise UnsupportedModel(
        f"{blocks_text(chosen).capitalize()} of {stack.path!r} {'runs' if one else 'run'} only with an image "
        f"(cross-attention): heal fits and measures on text, where removing {'it' if one else 'them'} changes "
        "nothing.",
        hint=f"Remove text blocks only: --remove {spans_text(rest)}." if rest else "Remove text blocks only.",
    )


def export_spec(spec: HealSpec) -> ExportSpec:
    """The `prune --save` run that writes the healed checkpoint (full precision, on CPU, as `prune` loads)."""
    model = dataclasses.replace(spec.model, device="cpu", device_map=None, quantization=None)
    removed = spec.remove if spec.from_curve is None else None
    return ExportSpec(
        model=model,
        save=str(spec.save),
        remove=removed,
        overwrite=spec.overwrite,
        from_curve=spec.from_curve,
        method=spec.curve_method if spec.from_curve else None,
        n=spec.n,
    )


def saved_names(spec: HealSpec, stack: LayerStack, values: dict[Any, Any]) -> dict[str, Any]:
    """Each healed parameter's value under its name in the class the export loads (the checkpoint's own).

    heal loads the model with its language-model head, which for a vision-language checkpoint (mllama) may be
    another class than the one the export saves, naming the same block's weights differently
    (`model.layers.1…` against `model.language_model.layers.1…`); the block index and the name inside the
    block are what both share, so the name is found through the export class's own stack, on a skeleton.
    """
    inside = {}
    for index, block in enumerate(stack.blocks):
        for name, parameter in block.named_parameters(remove_duplicate=False):
            inside[id(parameter)] = (index, name)
    config = load_config(spec.model)
    skeleton = build_skeleton(
        model_class_for(config, model_kind(config), spec.model.trust_remote_code), config, spec.model.trust_remote_code
    )
    target = find_layers(skeleton, spec.model.layers_path)
    full = {id(p): n for n, p in skeleton.named_parameters(remove_duplicate=False)}
    renamed = {}
    for parameter, value in values.items():
        index, name = inside[id(parameter)]
        renamed[full[id(target.blocks[index].get_parameter(name))]] = value.detach().cpu()
    return renamed


def check_peft() -> None:
    """LoRA needs peft (the extra [heal]): refused in one line before anything loads."""
    import importlib.util

    if importlib.util.find_spec("peft") is None:
        raise LayerprobeError(
            "--method lora needs peft, which is not installed.", hint="pip install 'layerprobe[heal]'"
        )


def run_heal(
    spec: HealSpec, progress: Progress | None = None, state_dir: Path | None = None, world: World | None = None
) -> HealResult | None:
    """Plan, load, fit/train, measure on held-out windows, and save the healed checkpoint (with `spec.save`).

    `state_dir` holds LoRA's resumable checkpoint (`--resume`); without it LoRA keeps none. Under a launch
    (`world` of several ranks) every rank fits and trains (parallel.py); the main rank alone then measures
    the held-out windows and the tasks, saves, and returns the result; the other ranks return None.
    """
    import torch

    progress = progress or Progress()
    world = world or World()
    timer = RunTimer()
    progress.stage("Reading corpus", spec.corpus.tokens + spec.held_out_tokens, "tok")
    settled = plan(spec, progress, world)
    parallel = DataParallel(world)
    progress.stage("Loading model")
    loaded = load_model(spec.model, purpose="head", tokenizer=settled.tokenizer)  # type: ignore[arg-type]
    stack = find_layers(loaded.model, spec.model.layers_path)
    model = loaded.model
    probe = torch.tensor([settled.calibration[0].input_ids[:_PROBE_POSITIONS]], device=loaded.input_device)
    sites: list[FoldSite] = []
    maps = []
    fits: list[dict[str, object]] = []
    fit_seconds = 0.0
    if spec.folds:
        sites = find_sites(model, stack, settled.removed, probe)
        width = hidden_width(model, stack, probe)
        progress.stage("Fitting the linear maps", sum(len(w.input_ids) for w in settled.calibration), "tok")
        clock = time.perf_counter()
        equations = calibrate(
            model, stack, sites, settled.calibration, spec.batch_size, loaded.input_device, width, progress.on_advance
        )
        maps = parallel.from_main([e.solve(spec.ridge) for e in equations])  # every rank folds rank 0's maps
        fit_seconds = time.perf_counter() - clock
        check_fold(model, stack, sites, maps, probe)
        for site, e, t in zip(sites, equations, maps, strict=True):
            fits.append(
                {
                    "start": site.start,
                    "end": site.end,
                    "fold_block": site.block,
                    "wiring": site.wiring,
                    "targets": [target.name for target in site.targets],
                    "positions": e.rows,
                    "relative_residual": e.relative_residual(t),
                    "map_norm": float((t**2).sum() ** 0.5),
                }
            )

    values = folded_values(stack, sites, maps)
    lora_record = None

    def step_shown(_step: int, loss: float) -> None:  # the bar shows the last loss beside the rate
        progress.detail(f"loss {loss:.4g}")
        progress.on_advance(1)

    if spec.trains:
        progress.stage("Training LoRA", spec.steps, "step")
        values, lora_record = train_lora(
            model,
            stack,
            settled.removed,
            values,
            settled.calibration,
            spec,
            loaded.input_device,
            state_dir,
            step_shown,
            parallel,
        )
    if not world.is_main:  # the held-out comparison, the tasks and the checkpoint: once, on the main rank
        return None

    def healed() -> AbstractContextManager[None]:
        return replaced(values)

    progress.stage("Held-out comparison", sum(len(w.input_ids) for w in settled.held_out), "tok")
    scores = per_window(loaded, stack, settled.removed, healed, settled.held_out, spec.corpus, spec.batch_size)
    metrics = summarise(scores, seed=spec.seed)
    tasks = None
    if settled.tasks is not None:
        tasks = score_tasks(loaded, stack, spec, settled.removed, healed, settled.tasks, progress, DEFAULT_DRAWS)
    parameters = {"original": model.num_parameters()}
    checkpoint = None
    notes: list[str] = []
    if spec.save is not None:
        replacements = saved_names(spec, stack, values)
        exported = run_export(
            export_spec(spec),
            progress,
            replacements,
            {"heal": {"method": spec.method, "ridge": spec.ridge if spec.folds else None}},
        )
        parameters = {"original": exported.parameters_before, "healed": exported.parameters_after}
        checkpoint = str(exported.directory)
        notes += exported.notes
    else:
        with removed_blocks(stack, settled.removed):
            parameters["healed"] = model.num_parameters()
    corpus = spec.corpus
    n_cal = len(settled.calibration)
    data = {
        **corpus.record(tokens=OMITTED, seq_len=settled.seq_len),
        "calibration": {
            "windows": [0, n_cal],
            "tokens": sum(len(w.input_ids) for w in settled.calibration),
        },
        "held_out": {
            "windows": [n_cal, n_cal + len(settled.held_out)],
            "tokens": sum(len(w.input_ids) for w in settled.held_out),
        },
    }
    return HealResult(
        model=model_info(loaded, stack),
        method=spec.method,
        removed=settled.removed,
        spans=[list(s) for s in spans_of(settled.removed)],
        ridge=spec.ridge if spec.folds else None,
        fits=fits,
        data=data,
        metrics=metrics,
        parameters=parameters,
        checkpoint=checkpoint,
        fit_seconds=fit_seconds,
        run=timer.finish(loaded.device_label),
        notes=notes,
        lora=lora_record,
        tasks=tasks,
    )
