"""Text in: corpora packed into token windows with an exact budget, local files, SQuAD questions."""

from layerprobe.data.corpus import iter_documents
from layerprobe.data.images import ImageWindow, image_batch, images_before_loading
from layerprobe.data.squad import SquadExample, load_squad
from layerprobe.data.windows import (
    Window,
    batches,
    build_windows,
    check_chat_template,
    pack_corpus,
    windows_before_loading,
)

__all__ = [
    "batches",
    "build_windows",
    "check_chat_template",
    "image_batch",
    "images_before_loading",
    "ImageWindow",
    "iter_documents",
    "load_squad",
    "pack_corpus",
    "SquadExample",
    "Window",
    "windows_before_loading",
]
