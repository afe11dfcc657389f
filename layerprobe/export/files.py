"""Everything an exported checkpoint holds besides its weights and config, and how it is put in place.

The tokenizer (saved by transformers, so chat templates and special tokens come along), the source's
other small files (e.g. a sentence-transformers pooling config), `layerprobe.json` (what was removed
from which source), the mergekit passthrough YAML, and the final rename that makes a finished
checkpoint appear at once.
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
import shutil
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from layerprobe.core import ExportSpec
from layerprobe.model import Progress, quiet_transformers
from layerprobe.results import EXPORT_RECORD as RECORD_NAME
from layerprobe.results import EXPORT_SCHEMA as RECORD_SCHEMA
from layerprobe.results import library_versions

if TYPE_CHECKING:
    from transformers import PretrainedConfig
# Not copied from the source: weights in any format (the export writes its own), the model card (it
# describes the unpruned model), VCS and cache folders.
NOT_COPIED = (
    "*.safetensors",
    "*.safetensors.index.json",
    "*.bin",
    "*.bin.index.json",
    "*.pt",
    "*.pth",
    "*.ckpt",
    "*.h5",
    "*.msgpack",
    "*.onnx",
    "*.onnx_data",
    "*.gguf",
    "*.ot",
    "*.tflite",
    "onnx/*",
    "openvino/*",
    "README.md",
    ".gitattributes",
    ".git/*",
    ".cache/*",
    RECORD_NAME,
)


def copy_tokenizer(spec: ExportSpec, directory: Path) -> list[str]:
    """Save the source's tokenizer into `directory`; a note instead when the source has none."""
    import transformers as tf

    with quiet_transformers():
        try:
            tokenizer = tf.AutoTokenizer.from_pretrained(
                spec.model.model, revision=spec.model.revision, trust_remote_code=spec.model.trust_remote_code
            )
        except (OSError, ValueError, KeyError) as exc:
            return [f"no tokenizer copied: the source has none that loads ({str(exc).splitlines()[0]})"]
        tokenizer.save_pretrained(directory)
    return []


def copy_other_files(source: Path, directory: Path) -> list[str]:
    """Copy the source directory's files that the export did not write itself (and no weights or card).

    Returns their relative paths. Files already in `directory` (config, tokenizer, …) win.
    """
    copied = []
    for file in sorted(p for p in source.rglob("*") if p.is_file()):
        relative = file.relative_to(source).as_posix()
        if any(fnmatch.fnmatch(relative, pattern) for pattern in NOT_COPIED) or (directory / relative).exists():
            continue
        (directory / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(file, directory / relative)
        copied.append(relative)
    return copied


def source_directory(spec: ExportSpec) -> tuple[Path | None, list[str]]:
    """Where the source's files are: the local directory, or the hub snapshot without its weights."""
    local = Path(spec.model.model).expanduser()
    if local.is_dir():
        return local, []
    from huggingface_hub import snapshot_download

    try:
        path = snapshot_download(spec.model.model, revision=spec.model.revision, ignore_patterns=list(NOT_COPIED))
    except Exception as exc:  # best effort: the weights, config and tokenizer are already written
        return None, [f"the source's other files were not copied ({type(exc).__name__}: {str(exc).splitlines()[0]})"]
    return Path(path), []


def record(
    spec: ExportSpec,
    config: PretrainedConfig,
    path: str,
    removed: list[int],
    kept: list[int],
    changes: dict[str, object],
    dtype: str,
    progress: Progress,
) -> dict[str, object]:
    """The provenance written as layerprobe.json: what was removed, from which source, by which version."""
    source = Path(spec.model.model).expanduser()
    return {
        "schema": RECORD_SCHEMA,
        "source": {
            "id": spec.model.model,
            "revision": spec.model.revision,
            "commit": getattr(config, "_commit_hash", None),
            "local_sha256": directory_digest(source, progress) if source.is_dir() else None,
            "architecture": (getattr(config, "architectures", None) or [None])[0],
            "model_type": getattr(config, "model_type", None),
        },
        "layer_path": path,
        "num_layers": {"before": len(removed) + len(kept), "after": len(kept)},
        "removed_blocks": removed,
        "kept_blocks": kept,
        "config_changes": changes,
        "dtype": dtype,
        "versions": library_versions(),
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def directory_digest(directory: Path, progress: Progress) -> str:
    """sha256 over every file's relative path and content: identifies a local source checkpoint."""
    files = sorted(p for p in directory.rglob("*") if p.is_file() and ".cache" not in p.parts)
    progress.stage("Hashing source", sum(p.stat().st_size for p in files), "B")
    digest = hashlib.sha256()
    for file in files:
        digest.update(str(file.relative_to(directory)).encode() + b"\0")
        with file.open("rb") as handle:
            while chunk := handle.read(1 << 24):
                digest.update(chunk)
                progress.on_advance(len(chunk))
    return digest.hexdigest()


def kept_ranges(kept: list[int]) -> list[tuple[int, int]]:
    """Runs of consecutive kept blocks as half-open [start, end) ranges, mergekit's layer_range convention."""
    ranges: list[tuple[int, int]] = []
    for index in kept:
        if ranges and ranges[-1][1] == index:
            ranges[-1] = (ranges[-1][0], index + 1)
        else:
            ranges.append((index, index + 1))
    return ranges


def mergekit_yaml(spec: ExportSpec, kept: list[int], dtype: str) -> str:
    """The mergekit passthrough config that stacks the kept layer ranges: the same model, built by mergekit."""
    model = spec.model.model + (f"@{spec.model.revision}" if spec.model.revision else "")
    lines = [
        f"# mergekit passthrough equivalent of: layerprobe prune {spec.model.model} --remove {spec.remove}",
        "# layer_range is half-open [start, end), 0-based, like layerprobe's block indices.",
        "slices:",
    ]
    for start, end in kept_ranges(kept):
        lines += ["  - sources:", f"      - model: {_yaml_string(model)}", f"        layer_range: [{start}, {end}]"]
    lines.append("merge_method: passthrough")
    if dtype in ("float32", "bfloat16", "float16"):
        lines.append(f"dtype: {dtype}")
    return "\n".join(lines) + "\n"


def _yaml_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def move_into_place(tmp: Path, destination: Path) -> None:
    """Rename the finished checkpoint onto the destination; an old one (--overwrite) goes only after."""
    old = None
    if destination.exists():
        old = destination.parent / f".{destination.name}.layerprobe-old-{os.getpid()}"
        os.replace(destination, old)
    try:
        os.replace(tmp, destination)
    except BaseException:
        if old is not None:
            os.replace(old, destination)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
