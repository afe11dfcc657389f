"""Everything an exported checkpoint holds besides its weights and config, and what it must never replace.

The tokenizer (saved by transformers, so chat templates and special tokens come along), the source's
other small files (e.g. a sentence-transformers pooling config), `layerprobe.json` (what was removed
from which source), the mergekit passthrough YAML, and what the export may never replace (the
source's folders). Putting the finished checkpoint in place is `place.py`.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import shutil
import stat
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


def copy_other_files(source: Path, directory: Path) -> tuple[list[str], list[str]]:
    """Copy the source directory's regular files that the export did not write itself (and no weights or card).

    Only what lies inside the checkpoint is copied: a link to a file inside it (a hub snapshot's links
    into its own blobs) brings that file's content; a link that points outside it, a link to a folder
    and anything that is not a regular file (a pipe, a device) are skipped. Returns the relative paths
    copied and the skipped ones described ("tok.json -> /etc/passwd (a link out of the checkpoint)").
    Files already in `directory` (config, tokenizer, …) win.
    """
    boundary = checkpoint_boundary(source)
    copied, skipped = [], []
    for root, folders, names in os.walk(source, followlinks=False):
        base = Path(root)
        for folder in sorted(folders):
            relative = (base / folder).relative_to(source).as_posix()
            if _not_copied(relative + "/"):
                folders.remove(folder)
            elif (base / folder).is_symlink():
                skipped.append(f"{relative} -> {os.readlink(base / folder)} (a link to a folder, not followed)")
        folders.sort()
        for name in sorted(names):
            file = base / name
            relative = file.relative_to(source).as_posix()
            if _not_copied(relative) or (directory / relative).exists():
                continue
            real = Path(os.path.realpath(file))
            if file.is_symlink() and not (real.is_file() and boundary in real.parents):
                skipped.append(f"{relative} -> {os.readlink(file)} (a link out of the checkpoint)")
                continue
            if not stat.S_ISREG(os.stat(real).st_mode):
                skipped.append(f"{relative} (not a regular file)")
                continue
            (directory / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(real, directory / relative)
            copied.append(relative)
    return copied, skipped


def _not_copied(relative: str) -> bool:
    return any(fnmatch.fnmatch(relative, pattern) for pattern in NOT_COPIED)


def checkpoint_boundary(source: Path) -> Path:
    """The folder a checkpoint's files may live in: the directory, or a hub snapshot's model cache folder.

    A snapshot (`…/models--org--name/snapshots/<commit>`) holds links into the blobs of its model folder.
    """
    real = source.resolve()
    if real.parent.name == "snapshots" and real.parent.parent.name.startswith("models--"):
        return real.parent.parent
    return real


def source_places(spec: ExportSpec) -> list[Path]:
    """Every folder or file the source checkpoint consists of, resolved: what an export may never replace.

    A local directory, and the targets of the links inside it; a hub model's cache folder (snapshots and blobs).
    """
    local = Path(spec.model.model).expanduser()
    if not local.is_dir():
        from huggingface_hub.constants import HF_HUB_CACHE

        return [Path(HF_HUB_CACHE, "models--" + spec.model.model.replace("/", "--")).resolve()]
    places = [local.resolve(), checkpoint_boundary(local)]
    for root, folders, names in os.walk(local, followlinks=False):
        for name in [*folders, *names]:
            if os.path.islink(os.path.join(root, name)):
                places.append(Path(os.path.realpath(os.path.join(root, name))))
    return list(dict.fromkeys(places))


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


def mergekit_yaml(spec: ExportSpec, removed: list[int], kept: list[int], dtype: str) -> str:
    """The mergekit passthrough config that stacks the kept layer ranges: the same model, built by mergekit.

    Written by PyYAML (`safe_dump`), so any model path (quotes, a newline, a colon) reads back exactly.
    """
    import yaml

    model = spec.model.model + (f"@{spec.model.revision}" if spec.model.revision else "")
    config: dict[str, object] = {
        "slices": [{"sources": [{"model": model, "layer_range": [start, end]}]} for start, end in kept_ranges(kept)],
        "merge_method": "passthrough",
    }
    if dtype in ("float32", "bfloat16", "float16"):
        config["dtype"] = dtype
    header = (
        f"# mergekit passthrough equivalent of: layerprobe prune {_comment_safe(spec.model.model)} "
        f"--remove {ranges_text(removed)}\n"
        "# layer_range is half-open [start, end), 0-based, like layerprobe's block indices.\n"
    )
    return header + yaml.safe_dump(config, sort_keys=False, default_flow_style=None)


def ranges_text(blocks: list[int]) -> str:
    """Blocks as the range syntax writes them: [4, 5, 6, 9] → '4-6,9'."""
    return ",".join(f"{a}" if b == a + 1 else f"{a}-{b - 1}" for a, b in kept_ranges(blocks))


def _comment_safe(text: str) -> str:
    """`text` as it may stand in a YAML comment: as is when printable, else JSON-quoted (no line breaks)."""
    return text if text.isprintable() else json.dumps(text)


WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")


def weight_bytes(model: str | os.PathLike[str]) -> int | None:
    """Bytes of the weight files of a local checkpoint directory (None for a hub id: nothing on disk to count)."""
    path = Path(model).expanduser()
    if not path.is_dir():
        return None
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and f.name.endswith(WEIGHT_SUFFIXES))
