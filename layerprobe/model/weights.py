"""The checkpoint's weights checked against its config, so a mismatch is refused instead of measured.

A `config.json` that disagrees with the weights loads without complaint in transformers: with 12 blocks
in the config and 9 in the weights, three blocks are randomly initialised (and look "lazy"); with 4 in
the config and 9 in the weights, a truncated model is measured. Both exit 0 unless refused here.

Two checks, both on the block stack only (a base checkpoint's missing head is `load`'s business):

- before loading (`check_files`): the tensor names and shapes in the safetensors headers (or the index's
  weight map, or a `.bin` opened on the meta device) against a weightless skeleton built from the
  config: the blocks present must be exactly 0 … L-1, and every tensor the skeleton also has must have
  its shape. Unreadable files (a corrupt header, a pickle that safe loading refuses) are refused here too.
- after loading (`check_loading_info`): transformers' own list of missing and unexpected keys, as a net
  for what names alone cannot show (a block that lacks one of its weights, converted checkpoints).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Collection, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict, cast

from layerprobe.core import LayerprobeError, ModelSpec

if TYPE_CHECKING:
    from torch import nn

# Where transformers looks for weights, in its order of preference.
_INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
_SINGLE = ("model.safetensors", "pytorch_model.bin")
_SHOWN = 3  # keys named in a message


class WeightsMismatch(LayerprobeError):
    """The checkpoint's weights do not fit its config (missing, extra or differently shaped tensors)."""


class LoadingInfo(TypedDict, total=False):
    """What `from_pretrained(..., output_loading_info=True)` reports beside the model: the keys read here."""

    missing_keys: Collection[str]
    unexpected_keys: Collection[str]


def check_files(spec: ModelSpec, skeleton: nn.Module, stack_path: str, num_layers: int, quantized: bool) -> None:
    """Compare the checkpoint's tensor names and shapes with the skeleton, reading only file headers.

    `skeleton` is the base model built on the meta device; `stack_path` the block stack inside it. Hub
    checkpoints are checked when their files are already cached (loading fetches them otherwise, and
    `check_loading_info` then checks what was loaded).
    """
    shapes = checkpoint_shapes(spec)
    if not shapes:
        return
    ignored = _ignored_patterns(skeleton)
    shapes = {key: shape for key, shape in shapes.items() if not any(p.search(key) for p in ignored)}
    prefix = getattr(skeleton, "base_model_prefix", "")
    relative = {_strip(key, prefix): shape for key, shape in shapes.items()}
    present = _block_indices(relative, stack_path) - _extra_predictors(skeleton.config, num_layers)
    if present:
        expected = set(range(num_layers))
        missing, extra = sorted(expected - present), sorted(present - expected)
        if missing or extra:
            if missing:
                keys = [k for k in skeleton.state_dict() if _block_index(k, stack_path) in missing]
                named = f"missing: {_first(keys)}"
            else:
                keys = [k for k in shapes if _block_index(_strip(k, prefix), stack_path) in extra]
                named = f"unexpected: {_first(keys)}"
            raise WeightsMismatch(
                _depth_message(spec.model, stack_path, num_layers, present, missing, extra) + f" ({named})",
                hint=_DEPTH_HINT,
            )
    if quantized:  # packed quantized tensors have other shapes by design
        return
    wrong = [
        (key, tuple(shape), tuple(tensor.shape))
        for key, tensor in skeleton.state_dict().items()
        if (shape := relative.get(key)) is not None and tuple(shape) != tuple(tensor.shape)
    ]
    if wrong:
        key, got, want = wrong[0]
        raise WeightsMismatch(
            f"{spec.model}: {len(wrong)} weight(s) have a shape that config.json does not describe, e.g. "
            f"{key} is {list(got)} in the checkpoint but {list(want)} by the config.",
            hint="config.json does not belong to these weights: use the config the checkpoint was saved with.",
        )


def check_loading_info(model_name: str, model: nn.Module, info: LoadingInfo, stack_path: str, base: nn.Module) -> None:
    """Refuse a loaded model whose block stack has weights transformers reported missing or unexpected."""
    prefixes = _stack_prefixes(model, base, stack_path)
    inside = re.compile(r"^(?:" + "|".join(re.escape(p) for p in prefixes) + r")\.\d+\.")
    missing = sorted(k for k in info.get("missing_keys", []) if inside.match(k))
    blocks = cast("nn.ModuleList", base.get_submodule(stack_path))  # the stack find_layers found there
    tolerated = _extra_predictors(getattr(model, "config", None), len(blocks))
    unexpected = sorted(
        k for k in info.get("unexpected_keys", []) if inside.match(k) and _index_after(k, inside) not in tolerated
    )
    if missing or unexpected:
        parts = []
        if missing:
            parts.append(f"missing from the checkpoint (would be random): {_first(missing)}")
        if unexpected:
            parts.append(f"in the checkpoint but not in the model config.json describes: {_first(unexpected)}")
        raise WeightsMismatch(
            f"{model_name}: weights of the block stack do not fit config.json; " + "; ".join(parts), hint=_DEPTH_HINT
        )


_DEPTH_HINT = (
    "config.json must describe the saved weights (num_hidden_layers and the layer pattern): fix it, or re-save "
    "the model with save_pretrained. layerprobe never measures randomly initialised or dropped blocks."
)


def translate_weights_error(exc: Exception, spec: ModelSpec) -> LayerprobeError | None:
    """Weight files transformers could not use (caught before loading for local and cached checkpoints)."""
    text = str(exc)
    if "ignore_mismatched_sizes" in text or "size mismatch" in text:
        return WeightsMismatch(
            f"{spec.model}: some weights have a shape that config.json does not describe.",
            hint="config.json does not belong to these weights: use the config the checkpoint was saved with.",
        )
    if "Weights only load failed" in text:
        return LayerprobeError(
            f"{spec.model}: its pytorch_model.bin is a pickle that holds more than tensors; loading it could run "
            "arbitrary code, so it is refused for safety.",
            hint="If you trust its source, convert it once in your own Python (torch.load(..., weights_only=False), "
            "then model.save_pretrained(dir, safe_serialization=True)) and pass dir.",
        )
    if type(exc).__name__ == "SafetensorError":
        return LayerprobeError(
            f"{spec.model}: a weight file is not valid safetensors ({text.splitlines()[0] if text else exc!r}).",
            hint="The file is damaged or incomplete: download it again (e.g. `hf download <id>`) or re-save it.",
        )
    return None


def checkpoint_shapes(spec: ModelSpec) -> dict[str, tuple[int, ...] | None]:
    """Every tensor name in the checkpoint with its shape (None where only the name is cheap to read)."""
    files, index = _weight_files(spec)
    if index is not None:
        shapes: dict[str, tuple[int, ...] | None] = {}
        for key, shard in index.items():
            shapes[key] = None if shard is None else shard.get(key)
        return shapes
    out: dict[str, tuple[int, ...] | None] = {}
    for file in files:
        out.update(_read_shapes(file))
    return out


def _weight_files(spec: ModelSpec) -> tuple[list[Path], dict[str, dict[str, tuple[int, ...]] | None] | None]:
    """The weight files (local or already cached); for a sharded checkpoint, key → shard shapes."""
    for name in _INDEXES:
        path = _local(spec, name)
        if path is None:
            continue
        weight_map = _read_index(path)
        shards: dict[str, dict[str, tuple[int, ...]] | None] = {}
        for shard in sorted(set(weight_map.values())):
            shard_path = _local(spec, shard)
            shards[shard] = None if shard_path is None else _read_shapes(shard_path)
        return [], {key: shards.get(shard) for key, shard in weight_map.items()}
    for name in _SINGLE:
        path = _local(spec, name)
        if path is not None:
            return [path], None
    return [], None


def weight_file_paths(spec: ModelSpec) -> list[Path]:
    """The checkpoint's weight files on this machine (local, or already in the hub cache), shards in name order.

    The files transformers loads: the shards an index names, else the single file. Empty when any of them
    is not at hand (or the index is unreadable): the caller then knows nothing rather than part of it.
    """
    for name in _INDEXES:
        path = _local(spec, name)
        if path is None:
            continue
        try:
            shards = [_local(spec, shard) for shard in sorted(set(_read_index(path).values()))]
        except (LayerprobeError, AttributeError, TypeError):  # unreadable, or not a name → file map
            return []
        return [shard for shard in shards if shard is not None] if all(shards) else []
    for name in _SINGLE:
        path = _local(spec, name)
        if path is not None:
            return [path]
    return []


def _read_index(path: Path) -> dict[str, str]:
    """The weight map of a sharded checkpoint's index: tensor name → shard file."""
    try:
        weight_map: dict[str, str] = json.loads(path.read_text())["weight_map"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise LayerprobeError(
            f"{path} is not a readable weight index: {exc}",
            hint="Download the checkpoint again, or re-save it with save_pretrained.",
        ) from exc
    return weight_map


def _local(spec: ModelSpec, name: str) -> Path | None:
    if os.path.isdir(spec.model):
        path = Path(spec.model) / name
        return path if path.is_file() else None
    try:
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(spec.model, name, revision=spec.revision)
    except Exception:  # noqa: BLE001 - an id the hub library cannot parse is reported by the loader
        return None
    return Path(found) if isinstance(found, str) else None


def _read_shapes(path: Path) -> dict[str, tuple[int, ...]]:
    """Tensor shapes from a safetensors header, or a `.bin` opened lazily on the meta device."""
    if path.suffix == ".safetensors":
        from safetensors import safe_open

        try:
            with safe_open(str(path), framework="pt") as handle:
                return {key: tuple(handle.get_slice(key).get_shape()) for key in handle.keys()}  # noqa: SIM118
        except Exception as exc:  # SafetensorError, or OSError for an unreadable file
            raise LayerprobeError(
                f"{path} is not a valid safetensors file ({str(exc).splitlines()[0] if str(exc) else exc!r}).",
                hint="The file is damaged or incomplete (an interrupted download or copy?): download it again "
                "(e.g. `hf download <id>`) or re-save the model with save_pretrained.",
            ) from exc
    return read_bin_shapes(path)


def read_bin_shapes(path: Path) -> dict[str, tuple[int, ...]]:
    """Tensor names and shapes of a `pytorch_model.bin`, opened lazily on the meta device (no weight is read).

    Empty for a legacy (non-zip) file that cannot be opened lazily; a pickle that holds more than tensors is
    refused (loading it could run code).
    """
    import pickle

    import torch

    try:
        state = torch.load(str(path), map_location="meta", weights_only=True, mmap=True)
    except pickle.UnpicklingError as exc:
        raise LayerprobeError(
            f"{path} is a pickle that holds more than tensors, and loading it could run arbitrary code, so it is "
            "refused for safety.",
            hint="If you trust its source, convert it once: load it in your own Python "
            "(torch.load(..., weights_only=False)), then model.save_pretrained(dir, safe_serialization=True) "
            "and pass dir.",
        ) from exc
    except Exception as exc:  # noqa: BLE001 - legacy (non-zip) formats cannot be opened lazily
        if "zip" in str(exc).lower() or "mmap" in str(exc).lower():
            return {}
        raise LayerprobeError(
            f"{path} is not a readable PyTorch checkpoint ({str(exc).splitlines()[0] if str(exc) else exc!r}).",
            hint="The file is damaged or incomplete: download it again or re-save the model with save_pretrained.",
        ) from exc
    if not isinstance(state, dict):
        return {}
    return {key: tuple(value.shape) for key, value in state.items() if isinstance(value, torch.Tensor)}


def _ignored_patterns(skeleton: nn.Module) -> list[re.Pattern[str]]:
    """Checkpoint keys transformers drops on purpose (e.g. DeepSeek-V3's multi-token-prediction block 61).

    Declared on the family's model classes (the head classes too), which live in the skeleton's module.
    """
    import sys

    patterns: set[str] = set()
    module = sys.modules.get(type(skeleton).__module__)
    classes = [c for c in vars(module).values() if isinstance(c, type)] if module else [type(skeleton)]
    for candidate in classes:
        found = getattr(candidate, "_keys_to_ignore_on_load_unexpected", None)
        if isinstance(found, (list, tuple)):
            patterns.update(p for p in found if isinstance(p, str))
    return [re.compile(p) for p in sorted(patterns)]


def _extra_predictors(config: object, num_layers: int | None) -> set[int]:
    """Block indices just past the stack that hold multi-token-prediction modules, not blocks of the model."""
    extra = getattr(config, "num_nextn_predict_layers", None)
    if not isinstance(extra, int) or not isinstance(num_layers, int) or extra <= 0:
        return set()
    return set(range(num_layers, num_layers + extra))


def _index_after(key: str, inside: re.Pattern[str]) -> int:
    """The block index of a key that `inside` matched (`model.layers.3.` → 3)."""
    match = inside.match(key)
    assert match is not None, key  # only asked for keys inside the stack
    return int(match.group(0).rstrip(".").rsplit(".", 1)[1])


def _strip(key: str, prefix: str) -> str:
    return key[len(prefix) + 1 :] if prefix and key.startswith(prefix + ".") else key


def _block_indices(keys: Iterable[str], stack_path: str) -> set[int]:
    return {index for key in keys if (index := _block_index(key, stack_path)) is not None}


def _block_index(key: str, stack_path: str) -> int | None:
    """The block a key belongs to (`layers.3.mlp.up_proj.weight` → 3), None outside the stack."""
    if not key.startswith(stack_path + "."):
        return None
    head = key[len(stack_path) + 1 :].split(".", 1)[0]
    return int(head) if head.isdigit() else None


def _stack_prefixes(model: nn.Module, base: nn.Module, stack_path: str) -> list[str]:
    """The names the stack's keys may carry: from the base model, or from the head model (checkpoint naming)."""
    names = {getattr(model, "base_model_prefix", ""), getattr(base, "base_model_prefix", "")}
    names.update(name for name, child in model.named_children() if child is base)
    return [stack_path] + [f"{name}.{stack_path}" for name in sorted(n for n in names if n)]


def _depth_message(
    model: str, path: str, num_layers: int, present: set[int], missing: list[int], extra: list[int]
) -> str:
    held = f"{len(present)} block(s) ({_span(sorted(present))})"
    if missing:
        what = f"block(s) {_span(missing)} would be randomly initialised and measured"
    else:
        what = f"block(s) {_span(extra)} would be dropped and a truncated model measured"
    return f"{model}: config.json describes {num_layers} blocks at {path!r}, but the weights hold {held}: {what}."


def _span(indices: list[int]) -> str:
    if len(indices) > 2 and indices == list(range(indices[0], indices[-1] + 1)):
        return f"{indices[0]}-{indices[-1]}"
    return ", ".join(map(str, indices[:8])) + (", …" if len(indices) > 8 else "")


def _first(keys: list[str]) -> str:
    return ", ".join(keys[:_SHOWN]) + (f" (+{len(keys) - _SHOWN} more)" if len(keys) > _SHOWN else "")
