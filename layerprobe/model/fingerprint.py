"""A cheap, machine-independent fingerprint of a checkpoint's weights: the same files give the same string anywhere.

`layerprobe stability` accepts results of one model only: the same model id, or, for copies of one
checkpoint under different names (a hub download and its local snapshot, a path on another machine), the
same fingerprint. Hashing every byte of a 140 GB checkpoint would cost minutes per run, so the fingerprint
reads a few kilobytes per weight file instead, in sorted file order:

- the file's name and size;
- its tensor layout: the safetensors header's tensor names, dtypes, shapes and data offsets (its free-form
  `__metadata__` left out), or for a `pytorch_model.bin` the tensor names and shapes read on the meta device;
- `SAMPLES` evenly spaced slices of `SAMPLE_BYTES` bytes of the file (the whole file when it is smaller).

The layout alone would be the same for any two checkpoints of one architecture written by the same code
(a base model and its fine-tune); the sampled bytes tell them apart, since training changes every weight
matrix. A hub model's commit is hashed too. Identical fingerprints therefore mean "the same files" with
near certainty; different ones, different files (or a re-saved copy of the same weights).
"""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path

from layerprobe.core import LayerprobeError, ModelSpec
from layerprobe.model.weights import read_bin_shapes, weight_file_paths

RECIPE = b"layerprobe-weights-fingerprint/1\n"  # a new recipe is a new version: old and new never compare equal
SAMPLES = 16
SAMPLE_BYTES = 4096
_MAX_HEADER = 100 * 1024 * 1024  # safetensors' own limit on the header's size


def weights_fingerprint(spec: ModelSpec, commit: str | None = None) -> str | None:
    """`sha256:<hex>` of the checkpoint's weight files (module docstring), None when they are not at hand.

    A weight file that cannot be read this way (an unusual format, a file that vanished) also gives None:
    a missing fingerprint only means results are matched by model id alone.
    """
    files = weight_file_paths(spec)
    if not files:
        return None
    digest = hashlib.sha256(RECIPE)
    if commit:
        digest.update(f"commit {commit}\n".encode())
    try:
        for path in sorted(files, key=lambda p: p.name):
            size = path.stat().st_size
            digest.update(f"file {path.name} {size}\n".encode())
            digest.update(_layout(path))
            digest.update(_samples(path, size))
    except (OSError, ValueError, LayerprobeError):
        return None
    return "sha256:" + digest.hexdigest()


def _layout(path: Path) -> bytes:
    """The file's tensor names, dtypes, shapes and offsets as canonical JSON bytes."""
    if path.suffix == ".safetensors":
        with open(path, "rb") as handle:
            (length,) = struct.unpack("<Q", handle.read(8))
            if length > _MAX_HEADER:
                raise ValueError(f"{path}: a safetensors header of {length} bytes")
            header = json.loads(handle.read(length))
        if not isinstance(header, dict):
            raise ValueError(f"{path}: the safetensors header is not an object")
        header.pop("__metadata__", None)
        return json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    shapes = {name: list(shape) for name, shape in read_bin_shapes(path).items()}
    return json.dumps(shapes, sort_keys=True, separators=(",", ":")).encode()


def _samples(path: Path, size: int) -> bytes:
    """`SAMPLES` slices of `SAMPLE_BYTES` bytes, evenly spaced from the start to the end of the file."""
    with open(path, "rb") as handle:
        if size <= SAMPLES * SAMPLE_BYTES:
            return handle.read()
        pieces = []
        for index in range(SAMPLES):
            handle.seek(index * (size - SAMPLE_BYTES) // (SAMPLES - 1))
            pieces.append(handle.read(SAMPLE_BYTES))
        return b"".join(pieces)
