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
from typing import Annotated, Any, Literal

import typer
from rich.markup import escape
from rich.table import Table

from layerprobe.cli.console import (
    RichProgress,
    err,
    out,
    print_angular_summary,
    print_depth_summary,
    print_error,
    print_prune_summary,
)
from layerprobe.core import DTYPES, ENGINES, MAX_TOKENS, POSITIONS, LayerprobeError, check_output_dir
from layerprobe.gate import FORMATS
from layerprobe.results import LAZY_THRESHOLD, RunDir, write_json, write_text

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
    Literal[DTYPES],
    typer.Option(
        "--dtype",
        help="auto: the checkpoint's half precision on GPU, float32 on CPU.",
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
ModelArgsOpt = Annotated[
    str | None,
    typer.Option(
        "--model-args",
        help="Extra from_pretrained keywords as k=v,k=v (lm-eval's syntax): true/false/none, numbers, strings, "
        "and {k:v,...} mappings, e.g. low_cpu_mem_usage=true,max_memory={0:70GiB,1:70GiB,cpu:200GiB}.",
    ),
]
Load4Opt = Annotated[
    bool, typer.Option("--load-in-4bit", help="Quantize the weights to 4-bit NF4 with bitsandbytes (extra [quant]).")
]
Load8Opt = Annotated[
    bool, typer.Option("--load-in-8bit", help="Quantize the weights to 8-bit with bitsandbytes (extra [quant]).")
]
AttnOpt = Annotated[
    str | None,
    typer.Option("--attn-implementation", help="eager|sdpa|flash_attention_2|... (default: transformers' choice)."),
]
MaxStateMemoryOpt = Annotated[
    str | None,
    typer.Option(
        "--max-state-memory",
        help="Bound on hidden states held at once, e.g. 512MiB or 4GiB. prune-drop: block inputs the shared "
        "engine records per chunk (default 2GiB); angular: fp32 states gathered on one device (default 256MiB).",
    ),
]
OutOpt = Annotated[
    Path | None,
    typer.Option("--out", "--output_path", help="Output directory (default: ./layerprobe-out/<model>/)."),
]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars (results still print).")]


def parse_tokens(value: Any) -> int:
    """--tokens: a whole number, also written as 1e6 or 262_144 (capped in CorpusSpec, which says so)."""
    text = str(value).strip().replace("_", "").replace(",", "")
    try:
        number = float(text) if any(c in text.lower() for c in ".e") else int(text)
    except ValueError:
        number = None
    if number is None or number != number or number in (float("inf"), float("-inf")) or number != int(number):
        raise LayerprobeError(
            f"--tokens {value!r} is not a whole number of tokens.", hint="e.g. --tokens 262144 or 1e6."
        )
    return int(number)


# Corpus options shared by every command that streams text through a model (angular, depth).
TokensOpt = Annotated[
    str,
    typer.Option(
        "--tokens",
        metavar="INTEGER",
        help=f"Positions to stream through the model (exact; 1e6 spelling accepted; at most {MAX_TOKENS:,}).",
    ),
]
PositionsOpt = Annotated[
    Literal[POSITIONS],
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
WindowBatchOpt = Annotated[int, typer.Option("--batch-size", "--batch_size", help="Windows per forward pass.")]


def friendly_errors(command: Callable) -> Callable:
    """Print user mistakes as one red line (exit 2); let real bugs keep their traceback."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except LayerprobeError as exc:
            print_error(exc.message, exc.hint)  # escaped, one line each also in a pipe or log
            raise typer.Exit(exc.exit_code) from None
        except KeyboardInterrupt:
            err.print("[yellow]interrupted[/]")
            raise typer.Exit(130) from None

    return wrapper


def model_spec(
    model: str,
    revision: str | None,
    dtype: str,
    device: str,
    device_map: str | None,
    trust_remote_code: bool,
    layers_path: str | None,
    model_args: str | None,
    load_in_4bit: bool,
    load_in_8bit: bool,
    attn_implementation: str | None,
) -> Any:
    """The ModelSpec of every command that loads weights, from the shared options above."""
    from layerprobe.core import ModelSpec, parse_model_args, quantization_from_flags

    return ModelSpec(
        model,
        revision,
        dtype,
        device,
        device_map,
        trust_remote_code,
        layers_path,
        model_args=parse_model_args(model_args),
        quantization=quantization_from_flags(load_in_4bit, load_in_8bit),
        attn_implementation=attn_implementation,
    )


def model_slug(model: str) -> str:
    """A directory name for a model id or path: `meta-llama/Llama-2-7b-hf` → `meta-llama__Llama-2-7b-hf`."""
    path = Path(model)
    name = path.name if path.exists() else model.replace("/", "__")
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name) or "model"


def output_dir(out_opt: Path | None, model: str) -> Path:
    """`--out` if given, else ./layerprobe-out/<model-slug>/; an existing file there is refused at once."""
    return check_output_dir(out_opt if out_opt is not None else Path("layerprobe-out") / model_slug(model))


@app.command()
@friendly_errors
def angular(
    model: ModelArg,
    tokens: TokensOpt = "262144",
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
    model_args: ModelArgsOpt = None,
    load_in_4bit: Load4Opt = False,
    load_in_8bit: Load8Opt = False,
    attn_implementation: AttnOpt = None,
    max_state_memory: MaxStateMemoryOpt = None,
    out_dir: OutOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Angular distance d(x^l, x^(l+n)) between the inputs of every pair of blocks, in one pass.

    Writes angular.json (the full (L+1)×(L+1) matrix) and the heatmap angular.png / angular.pdf.
    """
    from layerprobe.core import DEFAULT_CHUNK_BYTES, AngularSpec, CorpusSpec, parse_memory_size

    spec = AngularSpec(
        model=model_spec(
            model,
            revision,
            dtype,
            device,
            device_map,
            trust_remote_code,
            layers_path,
            model_args,
            load_in_4bit,
            load_in_8bit,
            attn_implementation,
        ),
        corpus=CorpusSpec(dataset, dataset_config, split, text_field, parse_tokens(tokens), seq_len),
        positions=positions,
        batch_size=batch_size,
        max_state_bytes=parse_memory_size(max_state_memory) or DEFAULT_CHUNK_BYTES,
    )
    _run_and_report_angular(spec, output_dir(out_dir, model), quiet)


@app.command()
@friendly_errors
def demo(
    tokens: Annotated[str, typer.Option("--tokens", metavar="INTEGER", help="Positions to measure.")] = "32768",
    out_dir: Annotated[Path, typer.Option("--out", "--output_path", help="Output directory.")] = Path(
        "layerprobe-out/demo"
    ),
    quiet: QuietOpt = False,
) -> None:
    """Run `angular` offline on the real MiniLM-L6 BERT over the stdlib's pydoc text (needs the demo extra)."""
    from layerprobe.core import BUILTIN_CORPUS, AngularSpec, CorpusSpec, ModelSpec
    from layerprobe.model import DEMO_NAME, demo_model_dir

    spec = AngularSpec(
        model=ModelSpec(str(demo_model_dir()), device="cpu", name=DEMO_NAME),
        corpus=CorpusSpec(BUILTIN_CORPUS, None, "train", "text", parse_tokens(tokens), 512),
        batch_size=8,
    )
    _run_and_report_angular(spec, output_dir(out_dir, "demo"), quiet)


def _run_and_report_angular(spec: Any, directory: Path, quiet: bool) -> None:
    from layerprobe.measure import run_angular
    from layerprobe.model import world
    from layerprobe.plots import plot_angular

    check_output_dir(directory)
    ranks = world()
    progress = RichProgress(quiet or not ranks.is_main)
    with progress.running():
        result = run_angular(spec, progress.callbacks(), world=ranks)
    if not ranks.is_main:
        return
    json_path = write_json(RunDir(directory).angular_json, result.to_dict())
    plots = plot_angular(result, directory)
    print_angular_summary(result)
    out.print(f"wrote {json_path}" + "".join(f", {p}" for p in plots), highlight=False, markup=False)


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
    tokens: TokensOpt = "262144",
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
    model_args: ModelArgsOpt = None,
    load_in_4bit: Load4Opt = False,
    load_in_8bit: Load8Opt = False,
    attn_implementation: AttnOpt = None,
    out_dir: OutOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Why blocks are lazy: norm placement, residual growth, per-block and per-sublayer updates, gradient norms.

    Norm placement is traced (Pre-LN, Post-LN, Mix-LN, sandwich, parallel, LayerNorm Scaling); residual
    RMS and variance are given for x^0 … x^L, relative updates per block and per sublayer (attention,
    MLP), and with --grad the gradient norm of each block for the model's own loss.

    Writes depth.json and the figure depth.png / depth.pdf.
    """
    from layerprobe.core import DEFAULT_DATASET, CorpusSpec, DepthSpec
    from layerprobe.measure import run_depth
    from layerprobe.plots import plot_depth

    if dataset == DEFAULT_DATASET and dataset_config is None:
        dataset_config = "en"
    spec = DepthSpec(
        model=model_spec(
            model,
            revision,
            dtype,
            device,
            device_map,
            trust_remote_code,
            layers_path,
            model_args,
            load_in_4bit,
            load_in_8bit,
            attn_implementation,
        ),
        corpus=CorpusSpec(dataset, dataset_config, split, text_field, parse_tokens(tokens), seq_len),
        positions=positions,
        batch_size=batch_size,
        grad=grad,
        mask_seed=mask_seed,
    )
    directory = output_dir(out_dir, model)
    check_output_dir(directory)
    progress = RichProgress(quiet)
    with progress.running():
        result = run_depth(spec, progress.callbacks())
    json_path = write_json(RunDir(directory).depth_json, result.to_dict())
    plots = plot_depth(result, directory)
    print_depth_summary(result)
    out.print(f"wrote {json_path}" + "".join(f", {p}" for p in plots), highlight=False, markup=False)


@app.command("prune-curve")
@friendly_errors
def prune_curve(
    model: ModelArg,
    task: Annotated[
        list[str], typer.Option("--task", help="Any task prune-drop accepts (corpus, lm-eval tasks, squad). Repeat.")
    ],
    angular: Annotated[
        Path | None,
        typer.Option("--angular", help="angular.json of the same model (default: measured first on the corpus)."),
    ] = None,
    max_fraction: Annotated[
        float, typer.Option("--max-fraction", help="Largest fraction of blocks removed (n = 1 … ⌊fraction·L⌋).")
    ] = 0.5,
    baseline_seeds: Annotated[
        int, typer.Option("--baseline-seeds", help="Random-span baselines per n (seeds --seed, --seed+1, …).")
    ] = 0,
    limit: Annotated[float | None, typer.Option("--limit", help="Documents per lm-eval/SQuAD task.")] = None,
    num_fewshot: Annotated[int | None, typer.Option("--num-fewshot", help="Few-shot examples.")] = None,
    batch_size: Annotated[str, typer.Option("--batch-size", help="Requests or windows per forward pass.")] = "8",
    seed: Annotated[int, typer.Option("--seed", help="Seed for few-shot sampling and the random spans.")] = 1234,
    include_path: Annotated[Path | None, typer.Option("--include-path", help="Folder of extra lm-eval tasks.")] = None,
    tokens: TokensOpt = 262_144,
    dataset: DatasetOpt = "allenai/c4",
    dataset_config: DatasetConfigOpt = None,
    split: SplitOpt = "validation",
    text_field: TextFieldOpt = "text",
    seq_len: SeqLenOpt = 1024,
    revision: RevisionOpt = None,
    dtype: DtypeOpt = "auto",
    device: DeviceOpt = "auto",
    device_map: DeviceMapOpt = None,
    trust_remote_code: TrustOpt = False,
    layers_path: LayersPathOpt = None,
    out_dir: OutOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Score vs fraction of blocks removed: Gromov's min-angular-distance span, last blocks, random spans.

    Writes prune_curve.json and prune_curve_<task>.png (one line per method).
    """
    from layerprobe.core import CorpusSpec, ModelSpec, PruneSpec, parse_eval_batch_size
    from layerprobe.plots import plot_prune_curve
    from layerprobe.prune import PruneCurveSpec, run_prune_curve

    parsed_batch = parse_eval_batch_size(batch_size)
    spec = PruneCurveSpec(
        prune=PruneSpec(
            model=ModelSpec(model, revision, dtype, device, device_map, trust_remote_code, layers_path),
            tasks=split_task_names(task),
            limit=limit,
            num_fewshot=num_fewshot,
            batch_size=parsed_batch,
            seed=seed,
            include_path=str(include_path) if include_path else None,
            corpus=CorpusSpec(dataset, dataset_config, split, text_field, parse_tokens(tokens), seq_len),
        ),
        max_fraction=max_fraction,
        baseline_seeds=baseline_seeds,
    )
    directory = output_dir(out_dir, model)
    progress = RichProgress(quiet)
    with progress.running():
        result = run_prune_curve(spec, directory, str(angular) if angular else None, progress.callbacks())
    plots = plot_prune_curve(result, directory)
    out.print(f"wrote {RunDir(directory).prune_curve_json}" + "".join(f", {p}" for p in plots), markup=False)


@app.command("prune-drop")
@friendly_errors
def prune_drop(
    model: ModelArg,
    task: Annotated[
        list[str],
        typer.Option(
            "--task",
            "--tasks",
            help="lm-eval task or group (mmlu, arc_easy, a task under --include-path, a task YAML path), "
            "squad for extractive-QA models, or corpus (task-free NLL/KL/top-1 agreement on the --dataset "
            "windows). Repeat, or separate with commas (--tasks a,b), for several.",
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
        int | None,
        typer.Option("--num-fewshot", "--num_fewshot", help="Few-shot examples (default: the task's own)."),
    ] = None,
    batch_size: Annotated[
        str,
        typer.Option(
            "--batch-size",
            "--batch_size",
            help="Requests per forward pass, or 'auto' (lm-eval's detection of the largest that fits; 'auto:N' as "
            "in lm-eval).",
        ),
    ] = "8",
    seed: Annotated[int, typer.Option("--seed", help="Seed for few-shot sampling and every RNG.")] = 1234,
    include_path: Annotated[
        Path | None, typer.Option("--include-path", "--include_path", help="Folder of extra lm-eval task YAMLs.")
    ] = None,
    squad_data: Annotated[
        Path | None,
        typer.Option("--squad-data", help="Local SQuAD v1.1 JSON (or .jsonl) instead of the hub's rajpurkar/squad."),
    ] = None,
    engine: Annotated[
        Literal[ENGINES],
        typer.Option(
            "--engine",
            help="auto: shared-prefix for loglikelihood tasks, simple "
            "otherwise; simple: one full evaluation per removed "
            "block; shared: reuse the baseline's states of blocks "
            "before the removed one.",
        ),
    ] = "auto",
    unit: Annotated[
        str,
        typer.Option(
            "--unit",
            help="What each variant removes: block (the whole block), attention or mlp (that sublayer's output "
            "is zero, as if its output projection were; MoE: every expert).",
        ),
    ] = "block",
    span: Annotated[
        int,
        typer.Option(
            "--span",
            help="Remove n consecutive blocks [l, l+n) per variant (L-n+1 variants; --layers picks the starts l).",
        ),
    ] = 1,
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
            "--log_samples",
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
    tokens: TokensOpt = 262_144,
    dataset: DatasetOpt = "allenai/c4",
    dataset_config: DatasetConfigOpt = None,
    split: SplitOpt = "validation",
    text_field: TextFieldOpt = "text",
    seq_len: SeqLenOpt = 1024,
    revision: RevisionOpt = None,
    dtype: DtypeOpt = "auto",
    device: DeviceOpt = "auto",
    device_map: DeviceMapOpt = None,
    trust_remote_code: TrustOpt = False,
    layers_path: LayersPathOpt = None,
    model_args: ModelArgsOpt = None,
    load_in_4bit: Load4Opt = False,
    load_in_8bit: Load8Opt = False,
    attn_implementation: AttnOpt = None,
    max_state_memory: MaxStateMemoryOpt = None,
    out_dir: OutOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Performance drop ΔP = P_pruned − P_original with each block (span, attention or MLP sublayer) removed in turn.

    Writes prune_drop.json and one plot per task (prune_drop_<task>.png). Progress is saved after every
    evaluation; rerun with --resume after an interruption.
    """
    from layerprobe.core import (
        DEFAULT_STATE_BYTES,
        CorpusSpec,
        PruneSpec,
        Share,
        parse_eval_batch_size,
        parse_memory_size,
    )
    from layerprobe.model import world
    from layerprobe.prune import run_prune_drop

    share = Share.parse(shard) if shard is not None else None
    spec = PruneSpec(
        model=model_spec(
            model,
            revision,
            dtype,
            device,
            device_map,
            trust_remote_code,
            layers_path,
            model_args,
            load_in_4bit,
            load_in_8bit,
            attn_implementation,
        ),
        tasks=split_task_names(task),
        layers=layers_opt,
        limit=limit,
        num_fewshot=num_fewshot,
        batch_size=parse_eval_batch_size(batch_size),
        seed=seed,
        include_path=str(include_path) if include_path else None,
        squad_data=str(squad_data) if squad_data else None,
        engine=engine,
        unit=unit,
        span=span,
        prefix_reuse=prefix_reuse,
        max_state_bytes=parse_memory_size(max_state_memory) or DEFAULT_STATE_BYTES,
        log_samples=log_samples,
        angular=str(angular) if angular else None,
        corpus=CorpusSpec(dataset, dataset_config, split, text_field, parse_tokens(tokens), seq_len),
    )
    directory = output_dir(out_dir, model)
    check_output_dir(directory)
    ranks = world()
    progress = RichProgress(quiet or not ranks.is_main)
    with progress.running():
        result = run_prune_drop(spec, directory, resume=resume, progress=progress.callbacks(), shard=share, world=ranks)
    if not ranks.is_main:
        return
    if result is None:
        out.print(
            f"wrote shard {share} to {RunDir(directory).shard_json}; join all shards with `layerprobe merge`",
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

    check_output_dir(out_dir)
    _report_prune_drop(merge_shards(list(shards), out_dir), out_dir)


def _report_prune_drop(result: Any, directory: Path, log_samples: bool = False) -> None:
    from layerprobe.plots import plot_prune_drop

    plots = plot_prune_drop(result, directory)
    print_prune_summary(result)
    run = RunDir(directory)
    written = [*plots, *([run.samples_dir] if log_samples else [])]
    out.print(f"wrote {run.prune_drop_json}" + "".join(f", {p}" for p in written), highlight=False, markup=False)


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
        Literal[DTYPES],
        typer.Option("--dtype", help="auto: keep the checkpoint's own dtype."),
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
    from layerprobe.core import ExportSpec, ModelSpec
    from layerprobe.export import run_export

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
    check_output_dir(save, "--save")
    if mergekit_yaml is not None:
        if mergekit_yaml.is_dir():
            raise LayerprobeError(f"--mergekit-yaml {mergekit_yaml} is a directory.", hint="Give a file path.")
        check_output_dir(mergekit_yaml.parent, "--mergekit-yaml")
    progress = RichProgress(quiet)
    with progress.running():
        result = run_export(spec, progress.callbacks())
    before, after = len(result.removed) + len(result.kept), len(result.kept)
    changed = ", ".join(f"{k}={v}" for k, v in result.config_changes.items())
    out.print(
        f"[bold]{escape(model)}[/]: {before} → {after} blocks (removed {', '.join(map(str, result.removed))}), "
        f"{result.parameters_before:,} → {result.parameters_after:,} parameters; config: {escape(changed)}",
        highlight=False,
        soft_wrap=True,
    )
    for note in result.notes:
        err.print(f"[yellow]note:[/] {escape(note)}", highlight=False, soft_wrap=True)
    written = f"wrote {result.directory}" + (f", {result.mergekit_yaml}" if result.mergekit_yaml else "")
    out.print(written, highlight=False, markup=False)


def split_task_names(values: list[str]) -> tuple[str, ...]:
    """--task a,b --task c (lm-eval's comma lists, repeated or not) → ("a", "b", "c")."""
    return tuple(name.strip() for value in values for name in value.split(",") if name.strip())


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
    """Show the block stack layerprobe finds: its path, L, block class, parameters, norm placement, sublayers.

    Only the config is downloaded: the model is built without weights. Norm placement is traced with
    random weights, one block in memory at a time (--no-placement skips it).
    """
    from layerprobe.core import ModelSpec
    from layerprobe.model import check_skeleton_weights, find_layers, load_skeleton

    spec = ModelSpec(model, revision, trust_remote_code=trust_remote_code, layers_path=layers_path)
    with err.status("Reading config"):
        skeleton, architecture, kind = load_skeleton(spec)
    stack = find_layers(skeleton, layers_path)
    check_skeleton_weights(spec, skeleton, stack)  # a config that disagrees with the weights would list wrong L
    sizes = stack.parameters_per_block()
    traced = _traced_placement(skeleton, stack) if placement else None
    out.print(f"[bold]{escape(model)}[/]: {escape(f'{architecture} ({kind})')}", highlight=False)
    table = Table()
    table.add_column("block", justify="right")
    table.add_column("class")
    table.add_column("parameters", justify="right")
    if traced is not None:
        table.add_column("placement")
        table.add_column("attention")  # the modules prune-drop --unit attention / mlp zero, found by tracing
        table.add_column("mlp")
    for index, (block, size) in enumerate(zip(stack.blocks, sizes, strict=True)):
        row = [str(index), type(block).__name__, f"{size:,}"]
        if traced is not None:
            placed = traced.blocks[index]
            row += [traced.labels[index], *(s.module if s else "?" for s in (placed.attention, placed.mlp))]
        table.add_row(*row)
    out.print(table)
    if traced is not None:
        out.print(f"placement: {escape(traced.summary)}", highlight=False)
    out.print(
        f"stack path: {escape(stack.path)}   L = {stack.num_layers}   block class: {stack.block_class}   "
        f"parameters in blocks: {sum(sizes):,}",
        highlight=False,
    )


def _traced_placement(skeleton: Any, stack: Any) -> Any:
    """The traced placement of a weightless skeleton, or None (with a warning) when it cannot be traced."""
    from layerprobe.model import placement_without_weights

    vocab = getattr(getattr(skeleton, "config", None), "vocab_size", None) or 2
    try:
        with err.status("Tracing norm placement"):
            return placement_without_weights(skeleton, stack, vocab)
    except (LayerprobeError, RuntimeError, TypeError, ValueError) as exc:
        err.print(f"[yellow]warning:[/] norm placement not traced: {escape(str(exc))}", highlight=False)
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
    from layerprobe.plots import redraw

    for path in redraw(result_json, out_dir):
        out.print(f"wrote {path}", highlight=False, markup=False)


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
    output_format: Annotated[
        Literal[FORMATS], typer.Option("--format", help="How the verdict is written on stdout.")
    ] = "table",
    junit: Annotated[Path | None, typer.Option("--junit", help="Also write JUnit XML here.")] = None,
    plot: Annotated[
        bool, typer.Option("--plot/--no-plot", help="Draw compare.png (compare_<kind>.png for several kinds).")
    ] = True,
    out_dir: Annotated[
        Path | None, typer.Option("--out", help="Plot directory (default: next to the candidate result).")
    ] = None,
) -> None:
    """Gate a candidate's results against a baseline's: exit 0 pass, 1 regression, 2 bad input."""
    from layerprobe.gate import build_table, check_format, compare_paths, load_rules, plot_verdict, render, render_junit

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
        out.print(build_table(verdict))
    else:
        text = render(verdict, output_format)
        typer.echo(text if text.endswith("\n") else text + "\n", nl=False)
    if junit is not None:
        try:
            write_text(junit, render_junit(verdict))
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
