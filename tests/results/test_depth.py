"""depth.json: a run's result round trips through JSON and a malformed one is refused."""

from __future__ import annotations

import json

import pytest
from factories import depth_spec

from layerprobe.core.errors import LayerprobeError
from layerprobe.measure.depth import run_depth
from layerprobe.results import DepthResult
from layerprobe.results.io import DEPTH_SCHEMA


def test_result_round_trips_through_json(three_block_checkpoints, tmp_path):
    result = run_depth(depth_spec(three_block_checkpoints["llama"], grad=True))
    data = json.loads(json.dumps(result.to_dict()))
    assert data["schema"] == DEPTH_SCHEMA
    again = DepthResult.from_dict(data)
    assert again.to_dict() == result.to_dict()
    with pytest.raises(LayerprobeError, match="depth@1"):
        DepthResult.from_dict({**data, "schema": "layerprobe/angular@1"})
    broken = dict(
        data, residual={"rms": data["residual"]["rms"] | {"mean": [1.0]}, "variance": data["residual"]["variance"]}
    )
    with pytest.raises(LayerprobeError, match="L\\+1"):
        DepthResult.from_dict(broken)
