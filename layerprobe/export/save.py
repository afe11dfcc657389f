"""`layerprobe prune --save`: write a pruned checkpoint, the model without some blocks, loadable with `from_pretrained`.

The weights written are those of the in-memory removal (`model.removed_blocks`) that prune-drop
measures, so the exported model computes what was measured — the same as a mergekit passthrough of
the kept layers. Everything that can be refused is refused before a weight is read: bad ranges,
removing every block, an occupied destination or one that holds the source, sublayer removal (no
config can say "block l has no attention"), and a config that cannot describe the kept blocks
(`config.py`). The checkpoint is written to a temporary directory next to the destination and renamed
into place at the end (`place.py`), so a failure — a full disk included — leaves nothing half-written,
and an existing checkpoint being replaced is never lost.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import layerprobe.export.files as files
import layerprobe.export.place as place
from layerprobe.core import (
    ExportSpec,
    LayerprobeError,
    OutputError,
    check_output_dir,
    parse_layer_ranges,
)
from layerprobe.export.choice import chosen_blocks, read_chosen_set, refuse_sublayers
from layerprobe.export.config import (
    ModelClass,
    build_skeleton,
    kept_config,
    model_class_for,
    stack_config,
    verify_kept_config,
)
from layerprobe.model import (
    Progress,
    check_loading_info,
    check_skeleton_weights,
    count_field,
    exported_state,
    find_layers,
    load_config,
    model_kind,
    quiet_transformers,
    removed_blocks,
    side_of,
    tower_config_name,
    translate_load_error,
    translate_weights_error,
)
from layerprobe.results import ExportPlaces, RunDir, StagedFile, write_json

if TYPE_CHECKING:
    import torch
    from transformers import PretrainedConfig, PreTrainedModel


@dataclass
class ExportResult:
    """What was written: the directory, the blocks removed and kept, and the config fields changed."""

    directory: Path
    removed: list[int]
    kept: list[int]
    config_changes: dict[str, object]
    parameters_before: int
    parameters_after: int
    record: dict[str, object]
    mergekit_yaml: Path | None = None
    notes: list[str] = field(default_factory=list)
    stack: str | None = None  # an encoder-decoder's stack cut: "decoder stack decoder.block" (None: one stack)


def run_export(
    spec: ExportSpec,
    progress: Progress | None = None,
    replacements: Mapping[str, torch.Tensor] | None = None,
    record_extra: Mapping[str, object] | None = None,
) -> ExportResult:
    """Check everything cheap, then load, remove the blocks, and write the smaller checkpoint.

    Replacing an existing `--save` keeps one complete checkpoint there at every instant (`place.py`);
    what an interrupted earlier export left beside it is restored or removed first (notes say so).
    `replacements` (full parameter name → value; `layerprobe heal`'s folded or trained weights of kept
    blocks) are copied into the loaded weights before they are saved, and `record_extra` is added to
    layerprobe.json, so a healed checkpoint gets the same staging and placement as a pruned one.
    """
    progress = progress or Progress()
    destination = destination_of(spec)
    notes = recover_destination(spec)
    chosen = read_chosen_set(spec)
    _check_destination(destination, spec)
    progress.stage("Reading config")
    config = load_config(spec.model)
    model_class = model_class_for(config, model_kind(config), spec.model.trust_remote_code)
    skeleton = build_skeleton(model_class, config, spec.model.trust_remote_code)
    stack = find_layers(skeleton, spec.model.layers_path)
    num_layers = stack.num_layers
    refuse_sublayers(spec, config, num_layers)
    # The weight files must hold exactly the blocks the config describes, or the export would carry
    # randomly initialised blocks (or silently drop some) into a checkpoint that looks trained.
    check_skeleton_weights(spec.model, skeleton, stack)
    if chosen is not None:
        removed = chosen_blocks(chosen, num_layers, notes, spec, config)
    else:
        removed = parse_layer_ranges(spec.remove, num_layers, "--remove")
    if len(removed) == num_layers:
        what = f"--remove {spec.remove!r}" if chosen is None else f"The {chosen.method} set for n = {chosen.n}"
        raise LayerprobeError(f"{what} removes all {num_layers} blocks.", hint="Keep at least one block.")
    kept = [i for i in range(num_layers) if i not in set(removed)]
    side = side_of(skeleton, stack.path)  # an encoder-decoder's stack has its own count field
    count = count_field(config, side, num_layers) if side else "num_hidden_layers"
    sub = tower_config_name(config, stack)  # a vision tower's blocks are counted by its own sub-config
    new_config, changes = kept_config(config, num_layers, kept, count, sub=sub)
    verify_kept_config(
        skeleton, stack.path, removed, model_class, new_config, spec.model.trust_remote_code, count, sub=sub
    )
    del skeleton

    progress.stage("Loading weights")
    model = _load_weights(model_class, spec)
    _replace(model, replacements or {})
    # num_parameters() counts a tied embedding/head matrix once, as transformers reports the model.
    parameters_before = model.num_parameters()
    with removed_blocks(find_layers(model, stack.path), removed):
        parameters_after, needed = model.num_parameters(), state_bytes(model)
    dtype = str(next(model.parameters()).dtype).replace("torch.", "")
    tmp = ExportPlaces(destination).staging(os.getpid())
    shutil.rmtree(tmp, ignore_errors=True)
    free = _free_bytes(destination.parent)
    yaml_text = files.mergekit_yaml(spec, removed, kept, dtype) if spec.mergekit_yaml else None
    staged_yaml: StagedFile | None = None
    placed = False
    try:
        try:
            progress.stage("Writing checkpoint")
            _save_weights(model, spec, stack.path, removed, new_config, tmp, count, sub)
            notes += files.copy_tokenizer(spec, tmp)
            source, more_notes = files.source_directory(spec)
            notes += more_notes
            copied, skipped = files.copy_other_files(source, tmp) if source is not None else ([], [])
            if skipped:
                notes.append(f"not copied from the source: {'; '.join(skipped)}")
            record = files.record(spec, config, stack.path, removed, kept, changes, dtype, progress)
            record["parameters"] = {"before": parameters_before, "after": parameters_after}
            record["copied_files"] = copied
            record["skipped_files"] = skipped
            record.update(record_extra or {})
            if chosen is not None:
                record["chosen_set"] = {"from": chosen.source, "method": chosen.method, "n": chosen.n}
            write_json(RunDir(tmp).export_record, record)
            place.sync_tree(tmp)
        except Exception as exc:
            translated = place.no_space(exc, tmp, needed, free)
            if translated is None:
                raise
            raise translated from exc
        if yaml_text is not None:  # written before the checkpoint is put in place: a full disk leaves nothing new
            yaml_file = Path(spec.mergekit_yaml or "").expanduser()
            try:
                staged_yaml = StagedFile(yaml_file, yaml_text)
            except Exception as exc:
                translated = place.no_space(exc, yaml_file, len(yaml_text.encode()), None)
                if translated is None:
                    raise
                raise translated from exc
        place.replace_directory(tmp, destination)
        placed = True
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if staged_yaml is not None and not placed:
            staged_yaml.discard()
    yaml_path = None
    if staged_yaml is not None:
        try:
            yaml_path = staged_yaml.publish()  # one rename, after the checkpoint's
        except OutputError as exc:
            raise OutputError(
                f"{exc.message} The checkpoint at {destination} is complete; the YAML was not put in place.",
                exc.reason,
                hint=exc.hint,
            ) from exc
    return ExportResult(
        destination,
        removed,
        kept,
        changes,
        parameters_before,
        parameters_after,
        record,
        yaml_path,
        notes,
        f"{side} stack {stack.path}" if side else None,
    )


def recover_destination(spec: ExportSpec) -> list[str]:
    """Restore or clean what an interrupted export into `--save` left (see `place.recover`); one note each.

    `run_export` does it first; the command line calls it earlier to print the notes before any work.
    """
    return place.recover(destination_of(spec))


def check_destination(spec: ExportSpec) -> None:
    """Refuse an unusable `--save` at once (a file, occupied without --overwrite, holding the source)."""
    _check_destination(destination_of(spec), spec)


def _replace(model: PreTrainedModel, replacements: Mapping[str, torch.Tensor]) -> None:
    """Copy new values into named parameters (unknown names or shapes are a bug of the caller: ValueError)."""
    import torch

    parameters = dict(model.named_parameters(remove_duplicate=False))
    with torch.no_grad():
        for name, value in replacements.items():
            if name not in parameters or parameters[name].shape != value.shape:
                raise ValueError(f"no parameter {name} of shape {tuple(value.shape)} to replace")
            parameters[name].copy_(value.to(parameters[name].device, parameters[name].dtype))


def destination_of(spec: ExportSpec) -> Path:
    """`--save` as an absolute path (not resolved: a link given as --save is replaced, not its target)."""
    return Path(os.path.abspath(Path(spec.save).expanduser()))


def state_bytes(model: PreTrainedModel) -> int:
    """Bytes of the tensors `save_pretrained` writes: the state dict, a tied matrix counted once."""
    seen: dict[tuple[int, int, str], int] = {}
    for tensor in model.state_dict().values():
        seen[(tensor.data_ptr(), tensor.numel(), str(tensor.dtype))] = tensor.numel() * tensor.element_size()
    return sum(seen.values())


def _free_bytes(directory: Path) -> int | None:
    """Free bytes on the disk of `directory` (or its nearest existing ancestor); None if it cannot be asked."""
    for candidate in (directory, *directory.parents):
        if candidate.is_dir():
            try:
                return shutil.disk_usage(candidate).free
            except OSError:
                return None
    return None


def _save_weights(
    model: PreTrainedModel,
    spec: ExportSpec,
    path: str,
    removed: list[int],
    new_config: PretrainedConfig,
    directory: Path,
    count: str = "num_hidden_layers",
    sub: str | None = None,
) -> None:
    """Take the blocks out in memory and save_pretrained the model with the kept blocks' config.

    The tensors written are the model's with the blocks removed, after the design's rule for what it
    indexes by layer outside the blocks (`model.exported_state`: per-layer input slices, adapters).
    """
    stack = find_layers(model, path)
    kept = [i for i in range(stack.num_layers) if i not in set(removed)]
    old = stack_config(model.config, stack.num_layers, count, sub=sub)  # an encoder-decoder side, a vision tower
    with removed_blocks(stack, removed), _config_swapped(model, new_config), quiet_transformers():
        state = exported_state(model.state_dict(), old, kept)
        if spec.max_shard_size:
            model.save_pretrained(directory, state_dict=state, max_shard_size=spec.max_shard_size)
        else:
            model.save_pretrained(directory, state_dict=state)  # transformers' own shard size


def _check_destination(destination: Path, spec: ExportSpec) -> None:
    """Refuse a destination that is a file, a non-empty folder (without --overwrite), or that holds the source.

    Nothing that holds or contains the source checkpoint is ever replaced: not its directory, not a folder
    inside it, not a folder above it, nor one holding the files its links point to (a hub cache's blobs).
    `--mergekit-yaml` may not point into the source, at `--save` itself, or at any existing directory.
    """
    if destination.exists() and not destination.is_dir():
        raise LayerprobeError(f"--save {destination} is a file.", hint="Pass a directory path.")
    check_output_dir(destination.parent, "--save")
    backup = ExportPlaces(destination).backup
    if os.path.lexists(backup) and os.path.lexists(destination):  # what `recover` leaves for the user to decide
        raise LayerprobeError(
            f"--save {destination}: {backup.name} is beside it, the checkpoint an interrupted export was replacing.",
            hint=f"Remove whichever of {destination} and {backup} you do not need, then run again.",
        )
    if destination.is_dir() and any(destination.iterdir()) and not spec.overwrite:
        raise LayerprobeError(
            f"--save {destination} exists and is not empty.", hint="Pick a new directory, or pass --overwrite."
        )
    target = destination.resolve()
    for source in files.source_places(spec):
        if source == target or source in target.parents:
            raise LayerprobeError(
                "--save is the source checkpoint's directory or inside it.", hint="Write to a directory outside it."
            )
        if target in source.parents:
            raise LayerprobeError(
                f"--save {destination} holds the source checkpoint ({source}): replacing it would delete the source.",
                hint="Write to a directory outside the source's folders.",
            )
    if not spec.mergekit_yaml:
        return
    yaml_path = Path(os.path.abspath(Path(spec.mergekit_yaml).expanduser()))
    if yaml_path == destination or yaml_path.resolve() == target:
        raise LayerprobeError(
            f"--mergekit-yaml {spec.mergekit_yaml} is the --save directory.", hint="Give a file path beside it."
        )
    if yaml_path.is_dir():
        raise LayerprobeError(f"--mergekit-yaml {spec.mergekit_yaml} is a directory.", hint="Give a file path.")
    resolved = yaml_path.resolve()
    for source in files.source_places(spec):
        if resolved == source or source in resolved.parents:
            raise LayerprobeError(
                f"--mergekit-yaml {spec.mergekit_yaml} is inside the source checkpoint ({source}): it would overwrite "
                "or add to the source's files.",
                hint="Write the YAML outside the source checkpoint.",
            )


def _load_weights(model_class: ModelClass, spec: ExportSpec) -> PreTrainedModel:
    """The full model on CPU in the checkpoint's own dtype (unless --dtype says otherwise)."""
    import torch

    dtype: str | torch.dtype = "auto" if spec.model.dtype == "auto" else getattr(torch, spec.model.dtype)
    with quiet_transformers():
        try:
            model, info = model_class.from_pretrained(
                spec.model.model,
                revision=spec.model.revision,
                trust_remote_code=spec.model.trust_remote_code,
                dtype=dtype,
                output_loading_info=True,
            )
        except (OSError, ValueError, KeyError) as exc:
            raise translate_load_error(exc, spec.model) from exc
        except Exception as exc:
            translated = translate_weights_error(exc, spec.model)
            if translated is None:
                raise
            raise translated from exc
    stack = find_layers(model, spec.model.layers_path)
    check_loading_info(spec.model.model, model, info, stack.path, stack.root)
    return model.eval()


@contextlib.contextmanager
def _config_swapped(model: PreTrainedModel, config: PretrainedConfig) -> Iterator[None]:
    """`save_pretrained` writes `model.config`: point it at the kept blocks' config while saving."""
    original = model.config
    model.config = config
    try:
        yield
    finally:
        model.config = original
