"""Which blocks `prune --save` removes: `--remove` ranges, or the set a prune_curve.json chose (`--from`).

Split from save.py by idea: what is removed, and why a choice is refused (a set of another model, a
sublayer the checkpoint format cannot drop), before any weight is read; save.py writes the result.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from layerprobe.core import ExportSpec, LayerprobeError, UnsupportedModel, parse_layer_ranges
from layerprobe.results import CurveSet, read_curve_set

if TYPE_CHECKING:
    from transformers import PretrainedConfig


def read_chosen_set(spec: ExportSpec) -> CurveSet | None:
    """The set `--from FILE --method NAME --n K` names; refused at once if it removes a sublayer alone."""
    if spec.from_curve is None or spec.method is None or spec.n is None:
        return None
    chosen = read_curve_set(Path(spec.from_curve).expanduser(), spec.method, spec.n)
    if chosen.sublayers:
        block, kind = chosen.sublayers[0]
        what = "attention" if kind == "attention" else "MLP"
        raise UnsupportedModel(
            f"The {chosen.method} set for n = {chosen.n} removes sublayers: the checkpoint format cannot express "
            f"removing the {what} of block {block} alone; export whole blocks.",
            hint="Pick a method whose sets are whole blocks, or measure the sublayer set in memory with prune-drop.",
        )
    return chosen


def chosen_blocks(
    chosen: CurveSet, num_layers: int, notes: list[str], spec: ExportSpec, config: PretrainedConfig
) -> list[int]:
    """The set's blocks, once the curve is known to be of a model of this architecture with this many blocks.

    Another id is only said (a local copy of a hub model has another id); another architecture or block
    count is another model, whose chosen blocks mean nothing here.
    """
    architectures = getattr(config, "architectures", None) or []
    if chosen.architecture and architectures and chosen.architecture != architectures[0]:
        raise LayerprobeError(
            f"{chosen.source} was measured on a {chosen.architecture}; {spec.model.model} is a {architectures[0]}.",
            hint="Export from the model the curve was measured on.",
        )
    if chosen.num_layers != num_layers:
        raise LayerprobeError(
            f"{chosen.source} was measured on a model of {chosen.num_layers} blocks; {spec.model.model} has "
            f"{num_layers}.",
            hint="Export from the model the curve was measured on.",
        )
    if chosen.model_id is not None and chosen.model_id != spec.model.model:
        notes.append(f"{chosen.source} was measured on {chosen.model_id}; exporting {spec.model.model}")
    return chosen.blocks


def refuse_sublayers(spec: ExportSpec, config: PretrainedConfig, num_layers: int) -> None:
    """Sublayer export needs a config that can say "block l has no attention/MLP"; no supported family has one."""
    for option, text, what in (
        ("--remove-attention", spec.remove_attention, "attention"),
        ("--remove-mlp", spec.remove_mlp, "MLP"),
    ):
        if not text:
            continue
        blocks = parse_layer_ranges(text, num_layers, option)
        raise UnsupportedModel(
            f"{option} {text!r}: the {config.model_type} config has no way to say that block "
            f"{blocks[0]} has no {what}, so the checkpoint cannot drop it, and zeroed weights are not a "
            "smaller model.",
            hint=f"Measure it in memory with `prune-drop --unit {what.lower()}`; export removes whole blocks "
            "(--remove).",
        )
