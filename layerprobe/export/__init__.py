"""`layerprobe prune --save`: the smaller checkpoint, its config, and the files beside its weights.

This room owns writing a checkpoint without some blocks: `save.py` runs the export, `config.py` writes
the config of the kept blocks and proves on weightless models that it builds them, `files.py` copies
the tokenizer and the source's other files, writes the provenance record and the mergekit YAML, and
knows what belongs to the source; `place.py` replaces an existing checkpoint so that one complete
checkpoint is always there, and recovers what an interrupted export left. It may import model, results
and core, never evaluate, measure, prune or anything above them. Importing it does not import torch
or transformers (the command line imports it at start-up): they are imported inside the functions
that need them.
"""

from layerprobe.export.config import build_skeleton, model_class_for
from layerprobe.export.files import weight_bytes
from layerprobe.export.save import ExportResult, check_destination, recover_destination, run_export, state_bytes

__all__ = [
    "build_skeleton",
    "model_class_for",
    "check_destination",
    "ExportResult",
    "state_bytes",
    "recover_destination",
    "run_export",
    "weight_bytes",
]
