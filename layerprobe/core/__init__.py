"""The ground floor: errors, every default, frozen option specs and their input checks, shares of work."""

from layerprobe.core.checks import check_output_dir, parse_eval_batch_size, parse_layer_ranges, parse_memory_size
from layerprobe.core.corpus_spec import CorpusSpec
from layerprobe.core.defaults import (
    BUILTIN_CORPUS,
    CORPUS_TASK,
    DEFAULT_CHUNK_BYTES,
    DEFAULT_DATASET,
    DEFAULT_STATE_BYTES,
    DTYPES,
    ENGINES,
    LOCAL_BUILDERS,
    MAX_TOKENS,
    POSITIONS,
    SQUAD_TASK,
    UNITS,
)
from layerprobe.core.errors import (
    OFFLINE_HINT,
    CorpusError,
    EmptyCorpus,
    LayerprobeError,
    ModelNotFound,
    ResultError,
    TaskError,
    UnsupportedModel,
    hub_offline,
    offline_model_hint,
)
from layerprobe.core.model_spec import ModelSpec, parse_model_args, quantization_from_flags
from layerprobe.core.run_specs import AngularSpec, DepthSpec, ExportSpec, PruneSpec, check_ablation
from layerprobe.core.shares import Share

__all__ = [
    "AngularSpec",
    "BUILTIN_CORPUS",
    "check_ablation",
    "check_output_dir",
    "CORPUS_TASK",
    "CorpusError",
    "CorpusSpec",
    "DEFAULT_CHUNK_BYTES",
    "DEFAULT_DATASET",
    "DEFAULT_STATE_BYTES",
    "DepthSpec",
    "DTYPES",
    "EmptyCorpus",
    "ENGINES",
    "ExportSpec",
    "hub_offline",
    "LayerprobeError",
    "LOCAL_BUILDERS",
    "MAX_TOKENS",
    "ModelNotFound",
    "ModelSpec",
    "OFFLINE_HINT",
    "offline_model_hint",
    "parse_eval_batch_size",
    "parse_layer_ranges",
    "parse_memory_size",
    "parse_model_args",
    "POSITIONS",
    "PruneSpec",
    "quantization_from_flags",
    "ResultError",
    "Share",
    "SQUAD_TASK",
    "TaskError",
    "UNITS",
    "UnsupportedModel",
]
