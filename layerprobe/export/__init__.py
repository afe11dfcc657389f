"""`layerprobe prune --save`: the smaller checkpoint, its config, and the files beside its weights."""

from layerprobe.export.save import run_export

__all__ = [
    "run_export",
]
