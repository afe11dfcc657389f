"""`--shard i/N` and ranks split work the same way: part i of N, round-robin (pure arithmetic, no processes)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

from layerprobe.core.errors import LayerprobeError

T = TypeVar("T")


@dataclass(frozen=True)
class Share:
    """Part `index` of `count` (0-based): items index, index+count, index+2·count, … of a list.

    Round-robin rather than contiguous: removing an early block costs the shared engine more than a
    late one, and interleaving keeps the shares about equally long.
    """

    index: int = 0
    count: int = 1

    def of(self, items: Sequence[T]) -> list[T]:
        return list(items[self.index :: self.count])

    @property
    def whole(self) -> bool:
        return self.count == 1

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    @classmethod
    def parse(cls, text: str) -> Share:
        """`i/N` with 0 ≤ i < N, as `--shard` takes it (0-based, like SLURM_ARRAY_TASK_ID 0-(N-1))."""
        match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
        if not match or not 0 <= int(match[1]) < int(match[2]):
            raise LayerprobeError(
                f"--shard {text!r} is not i/N with 0 ≤ i < N.",
                hint="E.g. --shard 0/4 … --shard 3/4 for four jobs (--shard $SLURM_ARRAY_TASK_ID/4).",
            )
        return cls(int(match[1]), int(match[2]))
