"""The `model` block every result carries, from a loaded model and its block stack.

One builder for every command, so every result names and describes its model (id, revision, commit, dtype,
block stack) the same way, and results of different commands can be matched to one checkpoint.
"""

from __future__ import annotations

from layerprobe.model.encdec import side_of
from layerprobe.model.fingerprint import weights_fingerprint
from layerprobe.model.load import LoadedModel
from layerprobe.model.stack import LayerStack
from layerprobe.model.streams import altup_stream, image_only_blocks
from layerprobe.model.towers import stack_role
from layerprobe.results import ModelInfo, jsonable


def model_info(loaded: LoadedModel, stack: LayerStack) -> ModelInfo:
    """The provenance block shared by every result (with the weights' fingerprint: model/fingerprint.py)."""
    return ModelInfo(
        id=loaded.spec.display_name,
        revision=loaded.spec.revision,
        commit=loaded.commit,
        architecture=loaded.architecture,
        model_type=loaded.model_type,
        kind=loaded.kind,
        dtype=loaded.dtype,
        num_layers=stack.num_layers,
        layer_path=stack.path,
        block_class=stack.block_class,
        quantization=loaded.quantization,
        attn_implementation=loaded.attn_implementation,
        model_args=jsonable(loaded.spec.recorded_args),  # a token's value is never recorded
        path=loaded.spec.model if loaded.spec.display_name != loaded.spec.model else None,
        weights_fingerprint=weights_fingerprint(loaded.spec, loaded.commit),
        side=side_of(loaded.model, stack.path),
        stack_role=stack_role(stack),
        stream=None if (altup := altup_stream(stack)) is None else altup.record,
        skipped_blocks=list(image_only_blocks(stack)) or None,
    )
