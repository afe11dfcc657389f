"""What `layerprobe layers` shows: a checkpoint's block stack, read from its config without loading weights.

The model is built on the meta device (no weights, no memory), its block stack found as every command
finds it, and the checkpoint's weight files checked against that stack, so a config that disagrees with
the weights is refused rather than listed with the wrong L. Norm placement, a property of the code and
the config, is traced with random weights one block at a time (skeleton.py); a model that cannot be
traced that way is still described, with the reason instead of a placement.
"""

from __future__ import annotations

from dataclasses import dataclass

from layerprobe.core import LayerprobeError, ModelSpec
from layerprobe.model.encdec import other_stacks, side_of
from layerprobe.model.load import check_skeleton_weights, load_skeleton
from layerprobe.model.progress import Progress
from layerprobe.model.skeleton import placement_without_weights
from layerprobe.model.stack import find_layers
from layerprobe.model.towers import TEXT, tower_of, vision_paths
from layerprobe.results import Placement


@dataclass(frozen=True)
class StackDescription:
    """A checkpoint's block stack as found without weights: plain values, nothing that holds a tensor.

    `block_classes[l]` and `parameters[l]` describe block l. `placement` is the traced norm placement
    (None when not asked for, or when tracing failed: then `placement_error` says why).
    """

    architecture: str
    kind: str
    path: str
    block_class: str
    block_classes: list[str]
    parameters: list[int]
    placement: Placement | None = None
    placement_error: str | None = None
    side: str | None = None  # an encoder-decoder's stack: "encoder" or "decoder"
    other_side: str | None = None  # how to measure its other stack ("the encoder: --layers-path encoder.block")
    role: str = TEXT  # the tower the stack belongs to (model/towers.py): "text" or "vision"
    other_stacks: tuple[str, ...] = ()  # stacks of another tower that --layers-path can name instead

    @property
    def num_layers(self) -> int:
        return len(self.block_classes)


def describe_stack(spec: ModelSpec, placement: bool = True, progress: Progress | None = None) -> StackDescription:
    """Read the config, find the block stack, check it against the weight files, and trace norm placement.

    Args:
        spec: the checkpoint (only its config and weight file headers are read).
        placement: trace each block's norm placement with random weights.
        progress: reports the stages "Reading config" and "Tracing norm placement".
    """
    progress = progress or Progress()
    progress.stage("Reading config")
    skeleton, architecture, kind = load_skeleton(spec)
    stack = find_layers(skeleton, spec.layers_path)
    check_skeleton_weights(spec, skeleton, stack)  # a config that disagrees with the weights would list wrong L
    block_classes, parameters = [type(block).__name__ for block in stack.blocks], stack.parameters_per_block()
    role = tower_of(stack).role
    others = tuple(p for p in vision_paths(skeleton) if p != stack.path) if role == TEXT else ()
    traced, error = None, None
    if placement:
        progress.stage("Tracing norm placement")
        vocab = getattr(getattr(skeleton, "config", None), "vocab_size", None) or 2
        try:
            traced = placement_without_weights(skeleton, stack, vocab)
        except LayerprobeError as exc:
            error = exc.message
        except Exception as exc:  # noqa: BLE001 - any family's forward may fail on random inputs: described anyway
            error = str(exc).splitlines()[0] if str(exc).strip() else f"{type(exc).__name__} while tracing"
    return StackDescription(
        architecture=architecture,
        kind=kind,
        path=stack.path,
        block_class=stack.block_class,
        block_classes=block_classes,
        parameters=parameters,
        placement=traced,
        placement_error=error,
        side=side_of(skeleton, stack.path),
        other_side=other_stacks(skeleton, stack.path),
        role=role,
        other_stacks=others,
    )
