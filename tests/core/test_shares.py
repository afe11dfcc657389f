"""`--shard i/n`: parsed once, and the n shares of any list deal every item exactly once."""

from __future__ import annotations

import pytest

from layerprobe.core.errors import LayerprobeError
from layerprobe.core.shares import Share


def test_shard_parsing():
    assert Share.parse("1/3") == Share(1, 3)
    assert Share(1, 3).of(list(range(8))) == [1, 4, 7]
    assert sorted(sum((Share(i, 3).of(list(range(8))) for i in range(3)), [])) == list(range(8))
    for bad in ("3/3", "-1/2", "1", "a/b", "0/0"):
        with pytest.raises(LayerprobeError, match="--shard"):
            Share.parse(bad)
