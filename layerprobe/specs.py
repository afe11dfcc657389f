"""What a run was asked to do, validated once, frozen afterwards.

The CLI turns options into these objects and the library trusts them; validation lives here so that a
library user gets the same one-line errors as a CLI user.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from layerprobe.errors import LayerprobeError

DTYPES = ("auto", "float32", "bfloat16", "float16")
POSITIONS = ("all", "last")
DEFAULT_DATASET = "allenai/c4"
DEFAULT_DATASET_CONFIG = "en"  # C4's English split; used when the default dataset is read without a config
# Local corpus files by suffix → the `datasets` builder that reads them.
LOCAL_BUILDERS = {".txt": "text", ".jsonl": "json", ".json": "json", ".parquet": "parquet"}
BUILTIN_CORPUS = "builtin:pydoc"
_DEVICE = re.compile(r"^(auto|cpu|mps|cuda(:\d+)?)$")


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

    def __post_init__(self) -> None:
        if self.positions not in POSITIONS:
            raise LayerprobeError(f"Unknown --positions {self.positions!r}.", hint="Use 'all' or 'last'.")
        if self.batch_size < 1:
            raise LayerprobeError(f"--batch-size must be positive, got {self.batch_size}.")


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


ENGINES = ("auto", "simple", "shared")
SQUAD_TASK = "squad"


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
    prefix_reuse: bool = True  # shared engine: compute a prefix shared by many requests once
    log_samples: bool = False  # write <out>/samples/<task>.jsonl (per-document values) at the end
    angular: str | None = None  # angular.json to rank-compare with ΔP (None: <out>/angular.json if there)

    def __post_init__(self) -> None:
        if not self.tasks:
            raise LayerprobeError("No --task given.", hint="e.g. --task mmlu, --task arc_easy or --task squad.")
        if len(set(self.tasks)) != len(self.tasks):
            raise LayerprobeError(f"A task is named twice in {list(self.tasks)}.")
        if self.engine not in ENGINES:
            raise LayerprobeError(f"Unknown --engine {self.engine!r}.", hint=f"Use one of {', '.join(ENGINES)}.")
        if self.limit is not None and self.limit <= 0:
            raise LayerprobeError(f"--limit must be positive, got {self.limit}.")
        if self.num_fewshot is not None and self.num_fewshot < 0:
            raise LayerprobeError(f"--num-fewshot must be >= 0, got {self.num_fewshot}.")
        if self.batch_size != "auto" and (not isinstance(self.batch_size, int) or self.batch_size < 1):
            raise LayerprobeError(f"--batch-size must be a positive integer or 'auto', got {self.batch_size!r}.")


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
