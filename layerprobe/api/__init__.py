"""The Python API on the model you already have: `lp.angular`, `lp.depth`, `lp.compare`, `lp.stability`.

Each takes a live transformers model (measured in place, never reloaded, copied or changed) or, like the
commands, a hub id or checkpoint directory, with keywords named and defaulted as the commands' options,
and returns the typed result the command writes. `layerprobe/__init__.py` re-exports these lazily, so
`import layerprobe as lp` stays light. Documented in docs/api.md.
"""

from layerprobe.api.arguments import corpus_spec
from layerprobe.api.experiments import compare, prune_drop, stability
from layerprobe.api.faces import Comparison
from layerprobe.api.measure import angular, depth, without_fingerprint

__all__ = [
    "angular",
    "compare",
    "Comparison",
    "corpus_spec",
    "depth",
    "prune_drop",
    "stability",
    "without_fingerprint",
]
