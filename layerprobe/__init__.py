"""layerprobe: which layers of a pretrained checkpoint actually do work.

The public API on a model you already hold (docs/api.md): `angular`, `depth`, `prune_drop`, `compare` and
`stability` (layerprobe.api), and the training monitor `Monitor` and `LayerprobeCallback`
(layerprobe.integrations). Below them, the spec-driven calls the commands make: `load_model`,
`find_layers`, `run_angular`, `run_prune_drop`, `run_depth`, `run_export`, and `find_sublayers` (a
block's attention and MLP, found by tracing). Imports are lazy (module `__getattr__`) so that
`layerprobe --help` does not pay for importing torch.
"""

from __future__ import annotations

__version__ = "0.1.0"

# name → the module that defines it, imported on first use.
_API = {
    "angular": "layerprobe.api",
    "depth": "layerprobe.api",
    "prune_drop": "layerprobe.api",
    "compare": "layerprobe.api",
    "stability": "layerprobe.api",
    "Monitor": "layerprobe.integrations",
    "LayerprobeCallback": "layerprobe.integrations",
}

__all__ = [
    *_API,
    "load_model",
    "find_layers",
    "run_angular",
    "run_prune_drop",
    "run_depth",
    "run_export",
    "find_sublayers",
    "__version__",
]


def __getattr__(name: str):
    if name in _API:
        import importlib

        return getattr(importlib.import_module(_API[name]), name)
    if name == "load_model":
        from layerprobe.model.load import load_model

        return load_model
    if name == "find_layers":
        from layerprobe.model.stack import find_layers

        return find_layers
    if name == "run_angular":
        from layerprobe.measure.angular import run_angular

        return run_angular
    if name == "run_prune_drop":
        from layerprobe.prune.drop import run_prune_drop

        return run_prune_drop
    if name == "run_depth":
        from layerprobe.measure.depth import run_depth

        return run_depth
    if name == "find_sublayers":
        from layerprobe.model.sublayers import find_sublayers

        return find_sublayers
    if name == "run_export":
        from layerprobe.export.save import run_export

        return run_export
    raise AttributeError(name)
