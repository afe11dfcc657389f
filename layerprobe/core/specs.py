"""What a run was asked to do, validated once, frozen afterwards.

The CLI turns options into these objects and the library trusts them; validation lives here so that a
library user gets the same one-line errors as a CLI user.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from layerprobe.core.errors import LayerprobeError

DTYPES = ("auto", "float32", "bfloat16", "float16")
POSITIONS = ("all", "last")
DEFAULT_DATASET = "allenai/c4"
DEFAULT_DATASET_CONFIG = "en"  # C4's English split; used when the default dataset is read without a config
# Local corpus files by suffix → the `datasets` builder that reads them.
LOCAL_BUILDERS = {".txt": "text", ".jsonl": "json", ".json": "json", ".parquet": "parquet"}
BUILTIN_CORPUS = "builtin:pydoc"
# The most positions one run streams: every window is kept in memory as Python ints (tens of bytes per
# token), so 2^24 ≈ 16.8M positions is already ~1 GB — far beyond what distances need to settle.
MAX_TOKENS = 1 << 24
ENGINES = ("auto", "simple", "shared")
_AUTO_BATCH = re.compile(r"^auto(:\d+)?$")
_DEVICE = re.compile(r"^(auto|cpu|mps|cuda(:\d+)?)$")
QUANTIZATIONS = ("4bit", "8bit")
ATTN_IMPLEMENTATIONS = ("eager", "sdpa", "flash_attention_2", "flash_attention_3", "flex_attention")
# from_pretrained keywords that have their own option: naming them in --model-args too would be ambiguous.
_DEDICATED = {
    "dtype": "--dtype",
    "torch_dtype": "--dtype",
    "device_map": "--device-map",
    "device": "--device",
    "revision": "--revision",
    "trust_remote_code": "--trust-remote-code",
    "load_in_4bit": "--load-in-4bit",
    "load_in_8bit": "--load-in-8bit",
    "quantization_config": "--load-in-4bit / --load-in-8bit",
    "pretrained": "the MODEL argument",
    "config": "the MODEL argument",
}
DEFAULT_STATE_BYTES = 2 * 1024**3  # shared engine: recorded block inputs held at once (prune-drop)
DEFAULT_CHUNK_BYTES = 256 * 1024**2  # angular: fp32 states gathered on one device at once


UNITS = ("block", "attention", "mlp")  # what a prune-drop variant removes (ablation.py)


def check_ablation(unit: str, span: int) -> None:
    """Validate --unit / --span (one home for PruneSpec and ablation.Ablation)."""
    if unit not in UNITS:
        raise LayerprobeError(f"Unknown --unit {unit!r}.", hint=f"Use one of {', '.join(UNITS)}.")
    if not isinstance(span, int) or span < 1:
        raise LayerprobeError(f"--span must be a positive integer, got {span!r}.")
    if span > 1 and unit != "block":
        raise LayerprobeError(
            f"--span {span} removes runs of whole blocks; it cannot be combined with --unit {unit}.",
            hint="Use --unit block (the default) with --span, or --span 1 with a sublayer unit.",
        )


@dataclass(frozen=True)
class ModelSpec:
    """Which checkpoint to load and where to put it."""

    model: str
    revision: str | None = None
    dtype: str = "auto"
    device: str = "auto"
    device_map: str | None = None
    trust_remote_code: bool = False
    layers_path: str | None = None
    model_args: dict[str, Any] = field(default_factory=dict)
    quantization: str | None = None
    attn_implementation: str | None = None
    name: str | None = None  # the name shown in titles, tables and result JSON, if not `model` (the demo's)

    @property
    def display_name(self) -> str:
        """How results name the model: `name` when given, else the hub id or path as typed."""
        return self.name or self.model

    def __post_init__(self) -> None:
        if not self.model:
            raise LayerprobeError("No model given.", hint="Pass a hub id like gpt2 or a local directory.")
        if self.model.startswith("~"):
            object.__setattr__(self, "model", os.path.expanduser(self.model))
        if self.dtype not in DTYPES:
            raise LayerprobeError(f"Unknown --dtype {self.dtype!r}.", hint=f"Choose one of {', '.join(DTYPES)}.")
        if not _DEVICE.match(self.device):
            raise LayerprobeError(f"Unknown --device {self.device!r}.", hint="Use auto, cpu, cuda, cuda:N or mps.")
        if self.device_map not in (None, "auto"):
            raise LayerprobeError(f"Unknown --device-map {self.device_map!r}.", hint="The only value is 'auto'.")
        if self.quantization not in (None, *QUANTIZATIONS):
            raise LayerprobeError(f"Unknown quantization {self.quantization!r}.", hint="Use 4bit or 8bit.")
        if "attn_implementation" in self.model_args:  # lm-eval's spelling; one home: the dedicated field
            if self.attn_implementation is not None:
                raise LayerprobeError(
                    "The attention implementation is given twice (--attn-implementation and --model-args).",
                    hint="Keep one of them.",
                )
            args = dict(self.model_args)
            object.__setattr__(self, "attn_implementation", args.pop("attn_implementation"))
            object.__setattr__(self, "model_args", args)
        if self.attn_implementation is not None and self.attn_implementation not in ATTN_IMPLEMENTATIONS:
            raise LayerprobeError(
                f"Unknown --attn-implementation {self.attn_implementation!r}.",
                hint=f"Use one of {', '.join(ATTN_IMPLEMENTATIONS)}.",
            )
        for key in self.model_args:
            if key in _DEDICATED:
                raise LayerprobeError(
                    f"--model-args names {key!r}, which has its own option.",
                    hint=f"Use {_DEDICATED[key]} instead of {key}= in --model-args.",
                )


def quantization_from_flags(load_in_4bit: bool, load_in_8bit: bool) -> str | None:
    """`--load-in-4bit` / `--load-in-8bit` → "4bit" / "8bit" / None; both at once is a mistake."""
    if load_in_4bit and load_in_8bit:
        raise LayerprobeError(
            "--load-in-4bit and --load-in-8bit were both given.", hint="Pick one quantization (or neither)."
        )
    return "4bit" if load_in_4bit else "8bit" if load_in_8bit else None


def parse_model_args(text: str | None) -> dict[str, Any]:
    """Read `--model-args k=v,k=v` the way lm-eval reads its `--model_args`, plus braces for mappings.

    Values: `true`/`false` → bool, `none` → None, integers and floats → numbers, anything else a string.
    A value in braces is a mapping with the same rules for its values and integer-looking keys as ints,
    which is what `max_memory` needs: `max_memory={0:20GiB,1:20GiB,cpu:60GiB}` (commas inside braces do
    not split arguments). Quotes around keys and values are dropped, so JSON-ish text works too.
    """
    if text is None or not text.strip():
        return {}
    parsed: dict[str, Any] = {}
    for part in _split_top_level(text.strip(), ","):
        if not part.strip():
            continue
        key, sep, value = part.partition("=")
        key = key.strip()
        if not sep or not key:
            raise LayerprobeError(
                f"Cannot read {part.strip()!r} in --model-args.",
                hint="Write key=value pairs separated by commas, e.g. attn_implementation=sdpa,low_cpu_mem_usage=true.",
            )
        if key in parsed:
            raise LayerprobeError(f"--model-args names {key!r} twice.")
        parsed[key] = _parse_value(value.strip(), key)
    return parsed


def _split_top_level(text: str, sep: str) -> list[str]:
    parts, depth, current = [], 0, []
    for char in text:
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth < 0:
                raise LayerprobeError(f"Unbalanced '}}' in --model-args {text!r}.")
        if char == sep and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    if depth != 0:
        raise LayerprobeError(f"Unbalanced '{{' in --model-args {text!r}.")
    parts.append("".join(current))
    return parts


def _parse_value(value: str, key: str) -> Any:
    if value.startswith("{") and value.endswith("}"):
        mapping: dict[Any, Any] = {}
        for item in _split_top_level(value[1:-1], ","):
            if not item.strip():
                continue
            inner_key, sep, inner_value = item.partition(":")
            if not sep:
                raise LayerprobeError(
                    f"Cannot read {item.strip()!r} in --model-args {key}=.",
                    hint="Write mappings as {key:value,...}, e.g. max_memory={0:20GiB,cpu:60GiB}.",
                )
            name = _scalar(inner_key.strip())
            mapping[name] = _parse_value(inner_value.strip(), key)
        return mapping
    return _scalar(value)


def _scalar(value: str) -> Any:
    value = value.strip().strip("'\"")
    lowered = value.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered == "none":
        return None
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            continue
    return value


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(b|kb|kib|mb|mib|gb|gib|tb|tib)?\s*$", re.IGNORECASE)
_UNITS = {"b": 1, "kb": 10**3, "kib": 2**10, "mb": 10**6, "mib": 2**20, "gb": 10**9, "gib": 2**30, "tb": 10**12}
_UNITS["tib"] = 2**40


def parse_memory_size(text: str | None, option: str = "--max-state-memory") -> int | None:
    """`512MiB`, `2GiB`, `1.5GB`, `1000000` (bytes) → bytes; None stays None (the library's default)."""
    if text is None:
        return None
    match = _SIZE.match(text)
    if not match:
        raise LayerprobeError(f"Cannot read {option} {text!r}.", hint="Write a size like 512MiB, 2GiB or 1.5GB.")
    size = int(float(match.group(1)) * _UNITS[(match.group(2) or "b").lower()])
    if size < 1:
        raise LayerprobeError(f"{option} must be positive, got {text!r}.")
    return size


@dataclass(frozen=True)
class CorpusSpec:
    """Where the neutral text comes from and how much of it is measured.

    `dataset` is a hub dataset id, a local .txt/.jsonl/.parquet file, or `builtin:pydoc` (the
    standard library's pydoc topics: real English text that needs no network). C4 without a config
    reads its English split, for library callers and the CLI alike.
    """

    dataset: str = DEFAULT_DATASET
    dataset_config: str | None = None
    split: str = "validation"
    text_field: str = "text"
    tokens: int = 262_144
    seq_len: int = 1024

    def __post_init__(self) -> None:
        if self.dataset == DEFAULT_DATASET and self.dataset_config is None:
            object.__setattr__(self, "dataset_config", DEFAULT_DATASET_CONFIG)
        if self.tokens < 1:
            raise LayerprobeError(f"--tokens must be positive, got {self.tokens}.")
        if self.tokens > MAX_TOKENS:
            raise LayerprobeError(
                f"--tokens {self.tokens:,} is more than layerprobe streams in one run (at most {MAX_TOKENS:,}).",
                hint="Distances settle long before that; 262,144 (the default) is plenty for most models.",
            )
        if self.seq_len < 2:
            raise LayerprobeError(f"--seq-len must be at least 2, got {self.seq_len}.")

    @property
    def is_local(self) -> bool:
        """A file on disk (or a path with a corpus file's suffix, reported missing when opened)."""
        return os.path.exists(self.dataset) or os.path.splitext(self.dataset)[1].lower() in LOCAL_BUILDERS

    @property
    def is_hub(self) -> bool:
        """Read from the Hugging Face hub: neither builtin:pydoc nor a local file."""
        return self.dataset != BUILTIN_CORPUS and not self.is_local


@dataclass(frozen=True)
class AngularSpec:
    """One `layerprobe angular` run."""

    model: ModelSpec
    corpus: CorpusSpec = field(default_factory=CorpusSpec)
    positions: str = "all"
    batch_size: int = 8
    max_state_bytes: int = DEFAULT_CHUNK_BYTES  # fp32 states gathered on one device at once

    def __post_init__(self) -> None:
        if self.max_state_bytes < 1:
            raise LayerprobeError(f"--max-state-memory must be positive, got {self.max_state_bytes} bytes.")
        if self.positions not in POSITIONS:
            raise LayerprobeError(f"Unknown --positions {self.positions!r}.", hint="Use 'all' or 'last'.")
        if self.batch_size < 1:
            raise LayerprobeError(f"--batch-size must be positive, got {self.batch_size}.")


def check_output_dir(directory: str | os.PathLike[str], option: str = "--out") -> Path:
    """Refuse an output directory that cannot be written, before any work: a file, or a read-only parent.

    Nothing is created here (a refused run leaves nothing behind); the nearest existing ancestor must be a
    writable directory, so the run can create the rest when it writes.
    """
    path = os.path.abspath(os.fspath(directory))
    if os.path.exists(path) and not os.path.isdir(path):
        raise LayerprobeError(f"{option} {directory} is a file, not a directory.", hint="Give a directory path.")
    ancestor = path
    while not os.path.exists(ancestor):
        parent = os.path.dirname(ancestor)
        if parent == ancestor:
            break
        ancestor = parent
    if not os.path.isdir(ancestor):
        raise LayerprobeError(
            f"{option} {directory} cannot be created: {ancestor} is an existing file.",
            hint=f"Pass a directory to {option} (it is created if missing).",
        )
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise LayerprobeError(
            f"{option} {directory} is not writable ({ancestor} does not allow writing).",
            hint="Pick a directory you can write to with --out.",
        )
    return Path(directory)


def parse_layer_ranges(text: str | None, num_layers: int, option: str = "--layers") -> list[int]:
    """Parse `0-3,7` (inclusive ranges, 0-based) into sorted unique block indices within [0, L-1].

    `option` names the command-line option in error messages.
    """
    if text is None or text.strip() in ("", "all"):
        return list(range(num_layers))
    chosen: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        match = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not match:
            raise LayerprobeError(
                f"Cannot read layer range {part!r} in {option} {text!r}.",
                hint="Use 0-based inclusive ranges like 0-3,7.",
            )
        start = int(match.group(1))
        end = int(match.group(2)) if match.group(2) is not None else start
        if end < start:
            raise LayerprobeError(f"Layer range {part!r} runs backwards.", hint=f"Did you mean {end}-{start}?")
        if end >= num_layers:
            raise LayerprobeError(
                f"{option} {text!r} is out of range: the model has {num_layers} blocks.",
                hint=f"Blocks are numbered 0 to {num_layers - 1}.",
            )
        chosen.update(range(start, end + 1))
    return sorted(chosen)


SQUAD_TASK = "squad"
CORPUS_TASK = "corpus"  # task-free: NLL, KL and top-1 agreement on the angular corpus (evaluate/corpus_metric.py)


@dataclass(frozen=True)
class PruneSpec:
    """One `layerprobe prune-drop` run: which tasks, which layers, how they are scored.

    `layers` is the CLI text (`0-3,7`, inclusive, 0-based; None = every block); it is resolved against
    the model's L once the model is loaded.
    """

    model: ModelSpec
    tasks: tuple[str, ...]
    layers: str | None = None
    limit: float | None = None
    num_fewshot: int | None = None
    batch_size: int | str = 8
    seed: int = 1234
    include_path: str | None = None
    squad_data: str | None = None
    engine: str = "auto"
    unit: str = "block"  # what a variant removes: a block, or block l's attention / MLP sublayer
    span: int = 1  # with unit "block": blocks [l, l+span) leave together
    prefix_reuse: bool = True  # shared engine: compute a prefix shared by many requests once
    max_state_bytes: int = DEFAULT_STATE_BYTES  # shared engine: recorded block inputs held at once
    log_samples: bool = False  # write <out>/samples/<task>.jsonl (per-document values) at the end
    angular: str | None = None  # angular.json to rank-compare with ΔP (None: <out>/angular.json if there)
    corpus: CorpusSpec = field(default_factory=CorpusSpec)  # the windows `--task corpus` scores on

    def __post_init__(self) -> None:
        if self.max_state_bytes < 1:
            raise LayerprobeError(f"--max-state-memory must be positive, got {self.max_state_bytes} bytes.")
        check_ablation(self.unit, self.span)
        if CORPUS_TASK in self.tasks and (self.unit != "block" or self.span != 1):
            raise LayerprobeError(
                f"--task {CORPUS_TASK} scores single removed blocks; it cannot be combined with --unit {self.unit} "
                f"--span {self.span} yet.",
                hint="Score the corpus task in its own run (layerprobe prune-curve scores spans on it).",
            )
        if not self.tasks:
            raise LayerprobeError("No --task given.", hint="e.g. --task mmlu, --task arc_easy or --task squad.")
        if len(set(self.tasks)) != len(self.tasks):
            raise LayerprobeError(f"A task is named twice in {list(self.tasks)}.")
        if self.engine not in ENGINES:
            raise LayerprobeError(f"Unknown --engine {self.engine!r}.", hint=f"Use one of {', '.join(ENGINES)}.")
        if self.limit is not None and (not math.isfinite(self.limit) or self.limit <= 0):
            raise LayerprobeError(
                f"--limit must be a positive finite number, got {self.limit}.",
                hint="A count of documents per task (e.g. 100) or a fraction below 1 (e.g. 0.1).",
            )
        if self.num_fewshot is not None and self.num_fewshot < 0:
            raise LayerprobeError(f"--num-fewshot must be >= 0, got {self.num_fewshot}.")
        object.__setattr__(self, "batch_size", parse_eval_batch_size(self.batch_size))


def parse_eval_batch_size(value: int | str) -> int | str:
    """prune-drop's --batch-size: a positive integer, `auto`, or lm-eval's `auto:N` (re-detect N times).

    Raises LayerprobeError for anything else, naming the three forms.
    """
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    text = str(value).strip()
    if text.isdigit() and int(text) >= 1:
        return int(text)
    if _AUTO_BATCH.match(text) and text != "auto:0":
        return text
    raise LayerprobeError(
        f"--batch-size must be a positive integer, 'auto' or 'auto:N', got {value!r}.",
        hint="e.g. --batch-size 8, --batch-size auto or --batch-size auto:4 (lm-eval's spelling).",
    )


@dataclass(frozen=True)
class DepthSpec:
    """One `layerprobe depth` run: the `angular` options, plus whether to measure gradient norms.

    `grad` adds one forward+backward pass with the model's own loss (next-token, or masked-LM with
    15 % masking seeded by `mask_seed`); it needs a checkpoint that ships its LM head.
    """

    model: ModelSpec
    corpus: CorpusSpec = field(default_factory=CorpusSpec)
    positions: str = "all"
    batch_size: int = 8
    grad: bool = False
    mask_seed: int = 1234

    def __post_init__(self) -> None:
        AngularSpec(self.model, self.corpus, self.positions, self.batch_size)  # the same checks, one home


@dataclass(frozen=True)
class ExportSpec:
    """One `layerprobe prune` run: write a checkpoint without some blocks (or sublayers).

    The removal options are the CLI text (`20-27`, inclusive, 0-based), resolved against the model's L
    once its config is read. `save` is the new checkpoint's directory; `mergekit_yaml`, if given, where
    the equivalent mergekit passthrough config goes. `max_shard_size` ("5GB", "500MB") caps each
    safetensors shard.
    """

    model: ModelSpec
    save: str
    remove: str | None = None
    remove_attention: str | None = None
    remove_mlp: str | None = None
    overwrite: bool = False
    mergekit_yaml: str | None = None
    max_shard_size: str | None = None  # None: transformers' save_pretrained default

    def __post_init__(self) -> None:
        if not self.save:
            raise LayerprobeError("No --save directory given.", hint="Pass --save DIR for the pruned checkpoint.")
        if not any((self.remove, self.remove_attention, self.remove_mlp)):
            raise LayerprobeError(
                "Nothing to remove.", hint="Pass --remove with 0-based inclusive block ranges, e.g. --remove 20-27."
            )
        if self.max_shard_size is not None and not re.fullmatch(r"\d+(\.\d+)?\s*[KMGT]i?B", self.max_shard_size):
            raise LayerprobeError(
                f"Cannot read --max-shard-size {self.max_shard_size!r}.", hint="Use a size like 5GB or 500MB."
            )
