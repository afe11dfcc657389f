"""Which source blocks a pruned checkpoint kept, as its `layerprobe.json` (written by `layerprobe prune`) says.

A result measured on an exported checkpoint records `PrunedFrom`, so `compare` can pair block l of the
pruned model with the source block it came from (`kept_blocks[l]`) instead of matching by index.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from layerprobe.core import ResultError
from layerprobe.results.io import EXPORT_SCHEMA, check_schema, read_json
from layerprobe.results.json_types import JSONObject
from layerprobe.results.rundir import RunDir
from layerprobe.results.validate import Node


@dataclass(frozen=True)
class PrunedFrom:
    """The checkpoint a pruned model was exported from: its id, its L, and the kept source blocks in order.

    Block l of the pruned model is block `kept_blocks[l]` of the source (0-based, ascending).
    """

    model: str
    num_layers: int
    kept_blocks: list[int]

    def to_dict(self) -> dict[str, object]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: JSONObject | Node, source: str = "pruned_from") -> PrunedFrom:
        node = Node.of(data, source)
        layers = node.key("num_layers").integer(minimum=1)
        kept = [item.integer(minimum=0) for item in node.key("kept_blocks").items()]
        if kept != sorted(set(kept)) or (kept and kept[-1] >= layers):
            node.key("kept_blocks").fail(f"ascending distinct block indices below num_layers = {layers}")
        return cls(model=node.key("model").text(), num_layers=layers, kept_blocks=kept)


def read_pruned_from(checkpoint: str | Path, num_layers: int) -> PrunedFrom | None:
    """The `PrunedFrom` of a local exported checkpoint with `num_layers` blocks; None for any other model.

    None as well when its `layerprobe.json` is unreadable or does not describe a model of `num_layers`
    blocks (edited or copied over another checkpoint): a mapping is recorded only when it is certain.
    """
    path = RunDir(Path(checkpoint).expanduser()).export_record
    if not path.is_file():
        return None
    try:
        root = Node(read_json(path), str(path))
        check_schema(root, EXPORT_SCHEMA)
        source = root.key("source").key("id").text()
        before = root.key("num_layers").key("before").integer(minimum=1)
        kept = root.key("kept_blocks").array()
        pruned = PrunedFrom.from_dict({"model": source, "num_layers": before, "kept_blocks": kept}, str(path))
    except ResultError:
        return None
    return pruned if len(pruned.kept_blocks) == num_layers else None
