"""The run specs refuse what cannot run, with the option to change: prune-drop's tasks, engine, limits."""

from __future__ import annotations

import pytest

from layerprobe.core import ModelSpec, PruneSpec
from layerprobe.core.errors import LayerprobeError


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"tasks": ()}, "No --task"),
        ({"tasks": ("a", "a")}, "named twice"),
        ({"engine": "fast"}, "Unknown --engine"),
        ({"limit": 0}, "--limit"),
        ({"num_fewshot": -1}, "--num-fewshot"),
        ({"batch_size": 0}, "--batch-size"),
        ({"batch_size": "max"}, "--batch-size"),
        ({"multiplicity": "bonferroni"}, "Unknown --multiplicity"),
    ],
)
def test_prune_spec_validation(kwargs, message):
    args = {"model": ModelSpec("m"), "tasks": ("arc_easy",), **kwargs}
    with pytest.raises(LayerprobeError, match=message):
        PruneSpec(**args)
