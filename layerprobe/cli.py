"""The `layerprobe` command line: options in, one library call, a rich summary out.

No tensor code lives here, and heavy imports (torch, transformers, lm_eval) happen inside commands so
that `--help` is instant. User mistakes (`LayerprobeError`) print one red line and exit with status 2.
"""

from __future__ import annotations

import functools
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from layerprobe.console import RichProgress, err, out, print_angular_summary, print_depth_summary, print_prune_summary
from layerprobe.errors import LayerprobeError
from layerprobe.results import ANGULAR_JSON, LAZY_THRESHOLD, PRUNE_DROP_JSON, SAMPLES_DIR

app = typer.Typer(
    name="layerprobe",
    help="Which layers of a pretrained Hugging Face checkpoint actually do work.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
    rich_markup_mode="rich",
)

# Options shared by every command that loads a model.
ModelArg = Annotated[str, typer.Argument(help="Hub id (org/name) or local checkpoint directory.")]
RevisionOpt = Annotated[str | None, typer.Option("--revision", help="Branch, tag or commit of a hub model.")]
DtypeOpt = Annotated[
    str,
    typer.Option(
        "--dtype", help="auto|float32|bfloat16|float16. auto: the checkpoint's half precision on GPU, float32 on CPU."
    ),
]
DeviceOpt = Annotated[str, typer.Option("--device", help="auto|cpu|cuda|cuda:N|mps. auto: GPU if present.")]
DeviceMapOpt = Annotated[
    str | None,
    typer.Option(
        "--device-map", help="'auto' spreads a model too large for one GPU over all GPUs (and CPU) via accelerate."
    ),
]
TrustOpt = Annotated[bool, typer.Option("--trust-remote-code", help="Allow the repository's own modelling code.")]
LayersPathOpt = Annotated[
    str | None,
    typer.Option("--layers-path", help="Dotted path of the blocks' ModuleList (e.g. model.layers), if not found."),
]
OutOpt = Annotated[Path | None, typer.Option("--out", help="Output directory (default: ./layerprobe-out/<model>/).")]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars (results still print).")]

# Corpus options shared by every command that streams text through a model (angular, depth).
TokensOpt = Annotated[int, typer.Option("--tokens", help="Positions to stream through the model (exact).")]
PositionsOpt = Annotated[
    str,
    typer.Option(
        "--positions",
        help="all: mean over every measured position; last: the last text token of each window (Gromov et al.).",
    ),
]
DatasetOpt = Annotated[
    str,
    typer.Option(
        "--dataset",
        help="Hub dataset id, a local .txt/.jsonl/.parquet file, or builtin:pydoc (offline English text).",
    ),
]
DatasetConfigOpt = Annotated[
    str | None,
    typer.Option("--dataset-config", help="Hub dataset config (default: en for allenai/c4, none otherwise)."),
]
SplitOpt = Annotated[str, typer.Option("--split", help="Hub dataset split.")]
TextFieldOpt = Annotated[str, typer.Option("--text-field", help="Column/field that holds the text.")]
SeqLenOpt = Annotated[int, typer.Option("--seq-len", help="Window length in tokens (capped by the model's context).")]
WindowBatchOpt = Annotated[int, typer.Option("--batch-size", help="Windows per forward pass.")]


def friendly_errors(command: Callable) -> Callable:
    """Print user mistakes as one red line (exit 2); let real bugs keep their traceback."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except LayerprobeError as exc:
            # soft_wrap: one line each, also when stderr is a pipe or log (rich would cut at 80 columns)
            err.print(f"[bold red]error:[/] {exc.message}", highlight=False, soft_wrap=True)
            if exc.hint:
                err.print(f"[dim]hint: {exc.hint}[/]", highlight=False, soft_wrap=True)
            raise typer.Exit(exc.exit_code) from None
        except KeyboardInterrupt:
            err.print("[yellow]interrupted[/]")
            raise typer.Exit(130) from None

    return wrapper


def model_slug(model: str) -> str:
    """A directory name for a model id or path: `meta-llama/Llama-2-7b-hf` → `meta-llama__Llama-2-7b-hf`."""
    path = Path(model)
    name = path.name if path.exists() else model.replace("/", "__")
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name) or "model"


def output_dir(out_opt: Path | None, model: str) -> Path:
    """`--out` if given, else ./layerprobe-out/<model-slug>/."""
    return out_opt if out_opt is not None else Path("layerprobe-out") / model_slug(model)


@app.command()
@friendly_errors
def angular(
    model: ModelArg,
    tokens: TokensOpt = 262_144,
    positions: PositionsOpt = "all",
    dataset: DatasetOpt = "allenai/c4",
    dataset_config: DatasetConfigOpt = None,
    split: SplitOpt = "validation",
    text_field: TextFieldOpt = "text",
    seq_len: SeqLenOpt = 1024,
    batch_size: WindowBatchOpt = 8,
    revision: RevisionOpt = None,
    dtype: DtypeOpt = "auto",
    device: DeviceOpt = "auto",
    device_map: DeviceMapOpt = None,
    trust_remote_code: TrustOpt = False,
    layers_path: LayersPathOpt = None,
    out_dir: OutOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Angular distance d(x^l, x^(l+n)) between the inputs of every pair of blocks, in one pass.

    Writes angular.json (the full (L+1)×(L+1) matrix) and the heatmap angular.png / angular.pdf.
    """
    from layerprobe.specs import AngularSpec, CorpusSpec, ModelSpec

    spec = AngularSpec(
        model=ModelSpec(model, revision, dtype, device, device_map, trust_remote_code, layers_path),
        corpus=CorpusSpec(dataset, dataset_config, split, text_field, tokens, seq_len),
        positions=positions,
        batch_size=batch_size,
    )
    _run_and_report_angular(spec, output_dir(out_dir, model), quiet)


@app.command()
@friendly_errors
def demo(
    tokens: Annotated[int, typer.Option("--tokens", help="Positions to measure.")] = 32_768,
    out_dir: Annotated[Path, typer.Option("--out", help="Output directory.")] = Path("layerprobe-out/demo"),
    quiet: QuietOpt = False,
) -> None:
    """Run `angular` offline on the real MiniLM-L6 BERT over the stdlib's pydoc text (needs the demo extra)."""
    from layerprobe.demo import demo_model_dir
    from layerprobe.specs import BUILTIN_CORPUS, AngularSpec, CorpusSpec, ModelSpec

    spec = AngularSpec(
        model=ModelSpec(str(demo_model_dir()), device="cpu"),
        corpus=CorpusSpec(BUILTIN_CORPUS, None, "train", "text", tokens, 512),
        batch_size=8,
    )
    _run_and_report_angular(spec, out_dir, quiet)


def _run_and_report_angular(spec: Any, directory: Path, quiet: bool) -> None:
    from layerprobe.angular import run_angular
    from layerprobe.distributed import world
    from layerprobe.report import plot_angular
    from layerprobe.results import write_json

    ranks = world()
    progress = RichProgress(quiet or not ranks.is_main)
    with progress.running():
        result = run_angular(spec, progress.callbacks(), world=ranks)
    if not ranks.is_main:
        return
    json_path = write_json(directory / ANGULAR_JSON, result.to_dict())
    plots = plot_angular(result, directory)
    print_angular_summary(result)
    out.print(f"wrote {json_path}" + "".join(f", {p}" for p in plots), highlight=False, soft_wrap=True)


@app.command()
@friendly_errors
def depth(
    model: ModelArg,
    grad: Annotated[
        bool,
        typer.Option(
            "--grad",
            help="Also the gradient norm of each block and sublayer for the model's own loss "
            "(next-token, or masked-LM for encoders); one more forward+backward pass.",
        ),
    ] = False,
    mask_seed: Annotated[int, typer.Option("--mask-seed", help="Seed of the 15 % masked-LM masking (--grad).")] = 1234,
    tokens: TokensOpt = 262_144,
    positions: PositionsOpt = "all",
    dataset: DatasetOpt = "allenai/c4",
    dataset_config: DatasetConfigOpt = None,
    split: SplitOpt = "validation",
    text_field: TextFieldOpt = "text",
    seq_len: SeqLenOpt = 1024,
    batch_size: WindowBatchOpt = 8,
    revision: RevisionOpt = None,
    dtype: DtypeOpt = "auto",
    device: DeviceOpt = "auto",
    device_map: DeviceMapOpt = None,
    trust_remote_code: TrustOpt = False,
    layers_path: LayersPathOpt = None,
    out_dir: OutOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Why blocks are lazy: norm placement, residual growth, per-block and per-sublayer updates, gradient norms.

    Norm placement is traced (Pre-LN, Post-LN, Mix-LN, sandwich, parallel, LayerNorm Scaling); residual
    RMS and variance are given for x^0 … x^L, relative updates per block and per sublayer (attention,
    MLP), and with --grad the gradient norm of each block for the model's own loss.

    Writes depth.json and the figure depth.png / depth.pdf.
    """
    from layerprobe.depth import run_depth
    from layerprobe.depth_plots import plot_depth
    from layerprobe.results import write_json
    from layerprobe.specs import DEFAULT_DATASET, CorpusSpec, DepthSpec, ModelSpec

    if dataset == DEFAULT_DATASET and dataset_config is None:
        dataset_config = "en"
    spec = DepthSpec(
        model=ModelSpec(model, revision, dtype, device, device_map, trust_remote_code, layers_path),
        corpus=CorpusSpec(dataset, dataset_config, split, text_field, tokens, seq_len),
        positions=positions,
        batch_size=batch_size,
        grad=grad,
        mask_seed=mask_seed,
    )
    directory = output_dir(out_dir, model)
    progress = RichProgress(quiet)
    with progress.running():
        result = run_depth(spec, progress.callbacks())
    json_path = write_json(directory / "depth.json", result.to_dict())
    plots = plot_depth(result, directory)
    print_depth_summary(result)
    out.print(f"wrote {json_path}" + "".join(f", {p}" for p in plots), highlight=False)


@app.command("prune-drop")
@friendly_errors
def prune_drop(
    model: ModelArg,
    task: Annotated[
        list[str],
        typer.Option(
            "--task",
            help="lm-eval task or group (mmlu, arc_easy, a task under "
            "--include-path), or squad for extractive-QA "
            "models. Repeat for several.",
        ),
    ],
    layers_opt: Annotated[
        str | None,
        typer.Option(
            "--layers",
            help="Blocks to remove, one at a time: 0-based inclusive ranges like 0-3,7 (default: all blocks).",
        ),
    ] = None,
    limit: Annotated[
        float | None, typer.Option("--limit", help="Documents per task (a value < 1 is a fraction), for quick runs.")
    ] = None,
    num_fewshot: Annotated[
        int | None, typer.Option("--num-fewshot", help="Few-shot examples (default: the task's own).")
    ] = None,
    batch_size: Annotated[
        str,
        typer.Option(
            "--batch-size", help="Requests per forward pass, or 'auto' (lm-eval's detection of the largest that fits)."
        ),
    ] = "8",
    seed: Annotated[int, typer.Option("--seed", help="Seed for few-shot sampling and every RNG.")] = 1234,
    include_path: Annotated[
        Path | None, typer.Option("--include-path", help="Folder of extra lm-eval task YAMLs.")
    ] = None,
    squad_data: Annotated[
        Path | None,
        typer.Option("--squad-data", help="Local SQuAD v1.1 JSON (or .jsonl) instead of the hub's rajpurkar/squad."),
    ] = None,
    engine: Annotated[
        str,
        typer.Option(
            "--engine",
            help="auto: shared-prefix for loglikelihood tasks, simple "
            "otherwise; simple: one full evaluation per removed "
            "block; shared: reuse the baseline's states of blocks "
            "before the removed one.",
        ),
    ] = "auto",
    prefix_reuse: Annotated[
        bool,
        typer.Option(
            "--prefix-reuse/--no-prefix-reuse",
            help="Shared engine: compute the key/value cache of a prompt prefix many requests share (few-shot "
            "examples) once per variant and run only the rest of each request.",
        ),
    ] = True,
    resume: Annotated[
        bool,
        typer.Option(
            "--resume", help="Continue an interrupted run in the same --out, recomputing nothing already done."
        ),
    ] = False,
    shard: Annotated[
        str | None,
        typer.Option(
            "--shard",
            help="i/N (0-based): score only this job's share of the variants, into its own --out; "
            "join the N shards with `layerprobe merge`.",
        ),
    ] = None,
    log_samples: Annotated[
        bool,
        typer.Option(
            "--log-samples",
            help="Also write every document's metric values, per variant, to <out>/samples/<task>.jsonl.",
        ),
    ] = False,
    angular: Annotated[
        Path | None,
        typer.Option(
            "--angular",
            help="angular.json of the same model: rank agreement of d(x^l, x^l+1) with ΔP "
            "(default: <out>/angular.json when it exists).",
        ),
    ] = None,
    revision: RevisionOpt = None,
    dtype: DtypeOpt = "auto",
    device: DeviceOpt = "auto",
    device_map: DeviceMapOpt = None,
    trust_remote_code: TrustOpt = False,
    layers_path: LayersPathOpt = None,
    out_dir: OutOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Performance drop ΔP = P_pruned − P_original with each block removed in turn.

    Writes prune_drop.json and one plot per task (prune_drop_<task>.png). Progress is saved after every
    evaluation; rerun with --resume after an interruption.
    """
    from layerprobe.distributed import Share, world
    from layerprobe.prune import run_prune_drop
    from layerprobe.shards import SHARD_JSON
    from layerprobe.specs import ModelSpec, PruneSpec

    share = Share.parse(shard) if shard is not None else None
    parsed_batch: int | str = batch_size if batch_size == "auto" else _positive_int(batch_size, "--batch-size")
    spec = PruneSpec(
        model=ModelSpec(model, revision, dtype, device, device_map, trust_remote_code, layers_path),
        tasks=tuple(task),
        layers=layers_opt,
        limit=limit,
        num_fewshot=num_fewshot,
        batch_size=parsed_batch,
        seed=seed,
        include_path=str(include_path) if include_path else None,
        squad_data=str(squad_data) if squad_data else None,
        engine=engine,
        prefix_reuse=prefix_reuse,
        log_samples=log_samples,
        angular=str(angular) if angular else None,
    )
    directory = output_dir(out_dir, model)
    ranks = world()
    progress = RichProgress(quiet or not ranks.is_main)
    with progress.running():
        result = run_prune_drop(spec, directory, resume=resume, progress=progress.callbacks(), shard=share, world=ranks)
    if not ranks.is_main:
        return
    if result is None:
        out.print(
            f"wrote shard {share} to {directory / SHARD_JSON}; join all shards with `layerprobe merge`",
            highlight=False,
            soft_wrap=True,
        )
        return
    _report_prune_drop(result, directory, spec.log_samples)


@app.command("merge")
@friendly_errors
def merge(
    shards: Annotated[list[Path], typer.Argument(help="The --out folders (or shard files) of `prune-drop --shard`.")],
    out_dir: Annotated[Path, typer.Option("--out", help="Where to write the joined prune_drop.json.")],
) -> None:
    """Join the shards of one `prune-drop --shard i/N` run into the prune_drop.json an unsharded run writes."""
    from layerprobe.prune import merge_shards

    _report_prune_drop(merge_shards(list(shards), out_dir), out_dir)


def _report_prune_drop(result: Any, directory: Path, log_samples: bool = False) -> None:
    from layerprobe.report import plot_prune_drop

    plots = plot_prune_drop(result, directory)
    print_prune_summary(result)
    written = [*plots, *([directory / SAMPLES_DIR] if log_samples else [])]
    out.print(
        f"wrote {directory / PRUNE_DROP_JSON}" + "".join(f", {p}" for p in written), highlight=False, soft_wrap=True
    )


@app.command("prune")
@friendly_errors
def prune_export(
    model: ModelArg,
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
    overwrite: Annotated[
        bool, typer.Option("--overwrite", help="Replace --save if it exists and is not empty (only once written).")
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
    revision: RevisionOpt = None,
    dtype: Annotated[
        str,
        typer.Option("--dtype", help="auto|float32|bfloat16|float16. auto: keep the checkpoint's own dtype."),
    ] = "auto",
    trust_remote_code: TrustOpt = False,
    layers_path: LayersPathOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Write a smaller checkpoint without the removed blocks, loadable with from_pretrained.

    The weights are those of the in-memory removal prune-drop measures (and of a mergekit passthrough
    of the kept layers). The config is rewritten for the kept blocks (num_hidden_layers, layer_types,
    MoE and sliding-window patterns) and every rebuilt block is checked against the original before any
    weight is read; the tokenizer and generation config are copied, and layerprobe.json records what was
    removed from which source. Runs on CPU; needs memory for the full model.
    """
    from layerprobe.export import run_export
    from layerprobe.specs import ExportSpec, ModelSpec

    spec = ExportSpec(
        model=ModelSpec(model, revision, dtype, "cpu", None, trust_remote_code, layers_path),
        save=str(save),
        remove=remove,
        remove_attention=remove_attention,
        remove_mlp=remove_mlp,
        overwrite=overwrite,
        mergekit_yaml=str(mergekit_yaml) if mergekit_yaml else None,
        max_shard_size=max_shard_size,
    )
    progress = RichProgress(quiet)
    with progress.running():
        result = run_export(spec, progress.callbacks())
    before, after = len(result.removed) + len(result.kept), len(result.kept)
    changed = ", ".join(f"{k}={v}" for k, v in result.config_changes.items())
    out.print(
        f"[bold]{model}[/]: {before} → {after} blocks (removed {', '.join(map(str, result.removed))}), "
        f"{result.parameters_before:,} → {result.parameters_after:,} parameters; config: {changed}",
        highlight=False,
        soft_wrap=True,
    )
    for note in result.notes:
        err.print(f"[yellow]note:[/] {note}", highlight=False, soft_wrap=True)
    written = f"wrote {result.directory}" + (f", {result.mergekit_yaml}" if result.mergekit_yaml else "")
    out.print(written, highlight=False, soft_wrap=True)


def _positive_int(text: str, option: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise LayerprobeError(f"{option} must be a positive integer or 'auto', got {text!r}.")
    return int(text)


@app.command()
@friendly_errors
def layers(
    model: ModelArg,
    revision: RevisionOpt = None,
    trust_remote_code: TrustOpt = False,
    layers_path: LayersPathOpt = None,
    placement: Annotated[
        bool,
        typer.Option(
            "--placement/--no-placement",
            help="Trace each block's norm placement (random weights, one block in memory at a time).",
        ),
    ] = True,
) -> None:
    """Show the block stack layerprobe finds: its path, L, the block class, parameters and norm placement per block.

    Only the config is downloaded: the model is built without weights. Norm placement is traced with
    random weights, one block in memory at a time (--no-placement skips it).
    """
    from layerprobe.layers import find_layers
    from layerprobe.models import check_skeleton_weights, load_skeleton
    from layerprobe.specs import ModelSpec

    spec = ModelSpec(model, revision, trust_remote_code=trust_remote_code, layers_path=layers_path)
    with err.status("Reading config"):
        skeleton, architecture, kind = load_skeleton(spec)
    stack = find_layers(skeleton, layers_path)
    check_skeleton_weights(spec, skeleton, stack)  # a config that disagrees with the weights would list wrong L
    sizes = stack.parameters_per_block()
    traced = _traced_placement(skeleton, stack) if placement else None
    out.print(f"[bold]{model}[/]: {architecture} ({kind})", highlight=False)
    table = Table()
    table.add_column("block", justify="right")
    table.add_column("class")
    table.add_column("parameters", justify="right")
    if traced is not None:
        table.add_column("placement")
    for index, (block, size) in enumerate(zip(stack.blocks, sizes, strict=True)):
        row = [str(index), type(block).__name__, f"{size:,}"]
        table.add_row(*row, *([traced.labels[index]] if traced is not None else []))
    out.print(table)
    if traced is not None:
        out.print(f"placement: {traced.summary}", highlight=False)
    out.print(
        f"stack path: {stack.path}   L = {stack.num_layers}   block class: {stack.block_class}   "
        f"parameters in blocks: {sum(sizes):,}",
        highlight=False,
    )


def _traced_placement(skeleton: Any, stack: Any) -> Any:
    """The traced placement of a weightless skeleton, or None (with a warning) when it cannot be traced."""
    from layerprobe.placement_skeleton import placement_without_weights

    vocab = getattr(getattr(skeleton, "config", None), "vocab_size", None) or 2
    try:
        with err.status("Tracing norm placement"):
            return placement_without_weights(skeleton, stack, vocab)
    except (LayerprobeError, RuntimeError, TypeError, ValueError) as exc:
        err.print(f"[yellow]warning:[/] norm placement not traced: {exc}", highlight=False, soft_wrap=True)
        return None


@app.command()
@friendly_errors
def plot(
    result_json: Annotated[
        Path, typer.Argument(help="An angular.json, prune_drop.json or depth.json written by layerprobe.")
    ],
    out_dir: Annotated[Path | None, typer.Option("--out", help="Where to write (default: next to the JSON).")] = None,
) -> None:
    """Redraw the plots of a result JSON (heatmap, ΔP bars or the depth figure)."""
    from layerprobe.depth_plots import redraw

    for path in redraw(result_json, out_dir):
        out.print(f"wrote {path}", highlight=False, soft_wrap=True)


@app.command("compare")
@friendly_errors
def compare_command(
    baseline: Annotated[Path, typer.Argument(help="Baseline result JSON, or a run directory.")],
    candidate: Annotated[Path, typer.Argument(help="Candidate result JSON of the same kind, or a run directory.")],
    rules_file: Annotated[
        Path | None,
        typer.Option("--rules", help="Rules TOML (sections angular, prune_drop, depth); flags override it."),
    ] = None,
    lazy_threshold: Annotated[
        float | None, typer.Option(help=f"A block is lazy when d(x^l, x^l+1) is below this (default {LAZY_THRESHOLD}).")
    ] = None,
    max_lazy_increase: Annotated[int | None, typer.Option(help="Extra lazy blocks allowed (default 0).")] = None,
    adjacent_tolerance: Annotated[
        float | None, typer.Option(help="Allowed fall of the mean adjacent distance (default 0.02).")
    ] = None,
    max_drop: Annotated[
        float | None, typer.Option(help="Allowed worsening of a task's full-model score (absolute, default 0.01).")
    ] = None,
    se_factor: Annotated[
        float | None, typer.Option(help="A layer's ΔP may worsen by this × combined stderr (default 2.0).")
    ] = None,
    max_rms_growth: Annotated[
        float | None, typer.Option(help="depth: RMS(x^L)/RMS(x^0) may grow by this factor over the baseline's (1.25).")
    ] = None,
    output_format: Annotated[str, typer.Option("--format", help="table|markdown|json on stdout.")] = "table",
    junit: Annotated[Path | None, typer.Option("--junit", help="Also write JUnit XML here.")] = None,
    plot: Annotated[
        bool, typer.Option("--plot/--no-plot", help="Draw compare.png (compare_<kind>.png for several kinds).")
    ] = True,
    out_dir: Annotated[
        Path | None, typer.Option("--out", help="Plot directory (default: next to the candidate result).")
    ] = None,
) -> None:
    """Gate a candidate's results against a baseline's: exit 0 pass, 1 regression, 2 bad input."""
    from rich.console import Console

    from layerprobe.gate.figures import plot_verdict
    from layerprobe.gate.render import build_table, check_format, render, render_junit
    from layerprobe.gate.rules import load_rules
    from layerprobe.gate.verdict import compare_paths

    check_format(output_format)
    rules = load_rules(
        rules_file,
        lazy_threshold=lazy_threshold,
        max_lazy_increase=max_lazy_increase,
        adjacent_tolerance=adjacent_tolerance,
        max_drop=max_drop,
        se_factor=se_factor,
        max_rms_growth=max_rms_growth,
    )
    verdict = compare_paths(baseline, candidate, rules)
    if output_format == "table":
        Console().print(build_table(verdict))
    else:
        typer.echo(render(verdict, output_format), nl=False)
    err = Console(stderr=True)
    if junit is not None:
        try:
            junit.parent.mkdir(parents=True, exist_ok=True)
            junit.write_text(render_junit(verdict), encoding="utf-8")
        except OSError as exc:
            raise LayerprobeError(f"Cannot write --junit {junit}: {exc.strerror or exc}") from exc
        err.print(f"wrote {junit}", highlight=False, markup=False, soft_wrap=True)
    if plot:
        try:
            for path in plot_verdict(verdict, out_dir):
                err.print(f"wrote {path}", highlight=False, markup=False, soft_wrap=True)
        except (LayerprobeError, OSError) as exc:  # a plot is a courtesy: it must not change the exit status
            err.print(
                f"warning: no plot: {getattr(exc, 'message', exc)}", style="yellow", highlight=False, markup=False
            )
    if not verdict.passed:
        raise typer.Exit(1)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(app())
