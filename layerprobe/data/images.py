"""Images in, for a vision tower (ViT, CLIP's or a VLM's encoder): a local folder or a hub image dataset.

Each image is prepared by the checkpoint's own image processor (AutoImageProcessor).

An image is one window: its positions are the tower's patches (plus a CLS token where the family has
one). `--tokens` counts patches: ceil(--tokens / patches per image) images are read, so the positions
measured are whole images (docs/methods.md, "Images"). Files are read in name order; the first file that
cannot be decoded is named in a one-line error, before any weight is read.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from layerprobe.core import BUILTIN_CORPUS, CorpusError, CorpusSpec, EmptyCorpus, LayerprobeError, ModelSpec
from layerprobe.model import TEXT, quiet_hub_logs, quiet_transformers, skeleton_tower, vision_paths

if TYPE_CHECKING:
    import torch

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff")
IMAGE_FIELD = "image"  # the column of a hub image dataset read when --text-field is left at "text"


@dataclass(frozen=True)
class ImageWindow:
    """One image as its tower reads it: the processor's arrays (no batch axis) and how many patches it has."""

    pixels: dict[str, Any]
    patches: int
    source: str

    @property
    def last_text_position(self) -> int:
        """`--positions last` on an image: its last patch (the CLS, where there is one, comes first)."""
        return -1


def is_image_folder(corpus: CorpusSpec) -> bool:
    """A local directory given as --dataset: read as a folder of images."""
    return os.path.isdir(os.path.expanduser(corpus.dataset))


def load_image_processor(spec: ModelSpec) -> Any:
    """The checkpoint's own image processor (AutoImageProcessor), or a one-line error if it ships none."""
    import transformers as tf

    with quiet_transformers():
        try:
            return tf.AutoImageProcessor.from_pretrained(
                spec.model, revision=spec.revision, trust_remote_code=spec.trust_remote_code
            )
        except (OSError, ValueError, KeyError) as exc:
            raise LayerprobeError(
                f"{spec.model} ships no image processor (preprocessor_config.json), so its images cannot be "
                "prepared as it was trained.",
                hint="Save the model's image processor beside it (AutoImageProcessor.save_pretrained(DIR)), or "
                "measure a checkpoint that ships one.",
            ) from exc


def patches_per_image(config: Any) -> int:
    """Patches of one image in the tower of `config` (its image_size / patch_size, squared)."""
    size, patch = getattr(config, "image_size", None), getattr(config, "patch_size", None)
    size = size[0] if isinstance(size, (list, tuple)) else size
    patch = patch[0] if isinstance(patch, (list, tuple)) else patch
    if not isinstance(size, int) or not isinstance(patch, int) or patch <= 0:
        return 1
    return max(1, (size // patch) ** 2)


def image_windows(processor: Any, corpus: CorpusSpec, patches: int) -> list[ImageWindow]:
    """ceil(corpus.tokens / patches) images of the corpus, each preprocessed by `processor`."""
    needed = math.ceil(corpus.tokens / patches)
    windows = []
    for name, image in _images(corpus):
        try:
            with quiet_transformers():
                arrays = processor(images=image.convert("RGB"), return_tensors="np")
        except Exception as exc:  # noqa: BLE001 - processors raise many types for an image they cannot size
            raise CorpusError(f"The image processor cannot prepare {name}: {exc}") from exc
        windows.append(ImageWindow({key: value[0] for key, value in arrays.items()}, patches, name))
        if len(windows) == needed:
            return windows
    raise EmptyCorpus(
        f"The image corpus {corpus.dataset} holds {len(windows)} image(s); --tokens {corpus.tokens:,} needs "
        f"{needed} ({patches} patches each).",
        hint=f"Lower --tokens to at most {max(1, len(windows)) * patches:,} or add images.",
    )


def image_batch(group: list[ImageWindow], device: torch.device | None) -> dict[str, torch.Tensor]:
    """The processor's arrays of a group of images stacked into one batch, on `device`."""
    import numpy as np
    import torch

    return {key: torch.from_numpy(np.stack([w.pixels[key] for w in group])).to(device) for key in group[0].pixels}


def _images(corpus: CorpusSpec) -> Iterator[tuple[str, Any]]:
    """(name, PIL image) of the folder's image files in name order, or of a hub dataset's image column."""
    from PIL import Image

    if corpus.dataset == BUILTIN_CORPUS:
        raise CorpusError("builtin:pydoc is text, not images.", hint="Pass a folder of images with --dataset.")
    if is_image_folder(corpus):
        folder = Path(os.path.expanduser(corpus.dataset))
        files = sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
        if not files:
            raise EmptyCorpus(
                f"The folder {folder} holds no image files ({', '.join(IMAGE_SUFFIXES)}).",
                hint="Pass a folder of images with --dataset.",
            )
        for path in files:
            try:
                with Image.open(path) as image:
                    image.load()
                    yield path.name, image.copy()
            except OSError as exc:
                raise CorpusError(f"Cannot read image {path}: {exc}", hint="Remove or replace the file.") from exc
        return
    yield from _hub_images(corpus)


def _hub_images(corpus: CorpusSpec) -> Iterator[tuple[str, Any]]:
    """Images of a hub dataset, streamed; the column is --text-field, or "image" when it is left at "text"."""
    field = IMAGE_FIELD if corpus.text_field == "text" else corpus.text_field
    with quiet_hub_logs():
        try:
            import datasets

            rows = datasets.load_dataset(corpus.dataset, corpus.dataset_config, split=corpus.split, streaming=True)
            for index, row in enumerate(rows):
                if field not in row:
                    raise CorpusError(
                        f"The image dataset {corpus.dataset} has no column {field!r} (columns: {', '.join(row)}).",
                        hint="Name the image column with --text-field.",
                    )
                yield f"{corpus.dataset}[{index}]", row[field]
        except CorpusError:
            raise
        except Exception as exc:  # datasets raises many unrelated types for "not reachable"
            raise CorpusError(
                f"Cannot open image dataset {corpus.dataset}: {str(exc).splitlines()[0] if str(exc) else exc!r}",
                hint="Without network access pass a local folder of images with --dataset.",
            ) from exc


def images_before_loading(model: ModelSpec, corpus: CorpusSpec) -> tuple[Any, list[ImageWindow]] | None:
    """The image processor and image windows when the measured stack reads images; None when it reads text.

    Decided on the weightless skeleton (`towers.skeleton_tower`), so a corpus of the wrong kind is refused
    in one line before any weight: text for a vision tower, a folder of images for a text stack.
    """
    skeleton, stack, tower = skeleton_tower(model)
    if tower.role == TEXT:
        if is_image_folder(corpus):
            vision = vision_paths(skeleton)
            raise CorpusError(
                f"--dataset {corpus.dataset} is a folder, but the stack {stack.path!r} of {model.model} reads text.",
                hint=f"Measure its vision tower on the images: --layers-path {vision[0]}"
                if vision
                else "Pass a .txt/.jsonl/.parquet file (or builtin:pydoc) with --dataset.",
            )
        return None
    if corpus.dataset == BUILTIN_CORPUS or (corpus.is_local and not is_image_folder(corpus)):
        raise CorpusError(
            f"The stack {stack.path!r} of {model.model} is a vision tower: it reads images, not the text of "
            f"{corpus.dataset}.",
            hint="Pass a folder of images (or an image dataset id) with --dataset.",
        )
    processor = load_image_processor(model)
    return processor, image_windows(processor, corpus, patches_per_image(getattr(tower.runner, "config", None)))
