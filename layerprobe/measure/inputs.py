"""What one batch of windows gives a model (token ids, or an image tower's pixels), and the shape check.

The check: a stack's blocks pass one (batch, position, hidden) residual stream.

Both measures (angular, depth) build their inputs here, so text windows and images (`data.ImageWindow`)
reach a stack's runner (`model.run_tower`) the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from layerprobe.core import UnsupportedModel
from layerprobe.data import ImageWindow, Window, image_batch
from layerprobe.model import LayerStack, Progress, skipped_note, stream_note

if TYPE_CHECKING:
    import torch


def model_inputs(group: Sequence[Window | ImageWindow], device: torch.device | None) -> dict[str, torch.Tensor]:
    """The keyword inputs of one batch: `input_ids` (batch, seq) for text, the processor's arrays for images."""
    import torch

    if isinstance(group[0], ImageWindow):
        return image_batch([w for w in group if isinstance(w, ImageWindow)], device)
    return {"input_ids": torch.tensor([w.input_ids for w in group if isinstance(w, Window)], device=device)}


def note_stack(stack: LayerStack, progress: Progress) -> None:
    """One line each for what is measured where a stack's blocks do not pass one stream each run.

    Gemma-3n: which AltUp stream; mllama: which blocks a text-only pass skips (`model.streams`).
    """
    for line in (stream_note(stack), skipped_note(stack)):
        if line:
            progress.note(line)


def check_state_shapes(architecture: str, states: Sequence[torch.Tensor], inputs: dict[str, torch.Tensor]) -> None:
    """Refuse states that are not one (batch, positions, hidden) stream of the batch's windows.

    Text: (batch, seq) must lead every state. Images: the batch leads and every depth has the same shape.
    Gemma-3n's active AltUp stream is chosen before this check (`model.residual_view`); any other leading
    axis of streams is refused in one line rather than measuring the wrong axis.
    """
    ids = inputs.get("input_ids")
    batch = next(iter(inputs.values())).shape[0]
    lead = tuple(ids.shape) if ids is not None else (batch, states[0].shape[1] if states[0].dim() == 3 else -1)
    if all(s.dim() == 3 and tuple(s.shape[:2]) == lead for s in states):
        return
    shape = tuple(states[0].shape)
    if len(shape) == 4 and ids is not None and shape[1:3] == tuple(ids.shape):
        raise UnsupportedModel(
            f"The blocks of {architecture} pass {shape[0]} streams of hidden states per position (shape {shape} "
            f"for input {tuple(ids.shape)}, as Gemma-3n's AltUp does), not one residual stream.",
            hint="layerprobe measures models whose blocks pass one (batch, sequence, hidden) residual stream; "
            "no --layers-path changes that for this model.",
        )
    raise UnsupportedModel(
        f"The blocks of {architecture} pass hidden states shaped {shape} for input {lead}; layerprobe expects "
        "(batch, sequence, hidden).",
        hint="Sequence-first models (some remote-code ones) are not supported: their blocks would need a "
        "transposed view of the states.",
    )


def measured_tokens(windows: Sequence[Window | ImageWindow], window_positions: Sequence[int], positions: str) -> int:
    """The positions the windows hold: text tokens, or for images the positions the tower gave each one.

    An image's positions (patches, plus a CLS where the family has one) are known once it has run: with
    `--positions all` they are what was averaged; with `last` (one per image) the planned patches count.
    """
    if not windows or isinstance(windows[0], Window):
        return sum(len(w.input_ids) for w in windows if isinstance(w, Window))
    if positions == "all":
        return int(sum(window_positions))
    return sum(w.patches for w in windows if isinstance(w, ImageWindow))


def image_record(windows: Sequence[Window | ImageWindow], window_positions: Sequence[int], positions: str) -> dict:
    """What a result's data block adds for an image corpus: `images` and `positions_per_image` (else nothing)."""
    if not windows or isinstance(windows[0], Window):
        return {}
    per_image = int(window_positions[0]) if positions == "all" and window_positions else None
    return {"images": len(windows), "positions_per_image": per_image}
