"""prune-curve on a vision-language model (its language model, text only) and on a per-layer design."""

from __future__ import annotations

import json

import pytest
from command_line import invoke
from factories import build_design_checkpoint, build_vlm_checkpoint


@pytest.mark.slow
@pytest.mark.parametrize("build", ["vlm", "design"])
def test_prune_curve_runs_on_a_vlm_and_on_per_layer_inputs(build, tmp_path):
    model = (
        build_vlm_checkpoint("llava", tmp_path / "model")
        if build == "vlm"
        else build_design_checkpoint("gemma3n", tmp_path / "model")
    )
    out = tmp_path / "out"
    # Gemma-3n's blocks pass altup stacks (inputs, batch, sequence, hidden): angular refuses them, delta scores
    methods = "angular,delta" if build == "vlm" else "delta"
    result = invoke(
        "prune-curve", model, "--task", "corpus", "--methods", methods, "--dataset", "builtin:pydoc",
        "--tokens", "512", "--seq-len", "64", "--device", "cpu", "--out", out,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    curve = json.loads((out / "prune_curve.json").read_text())
    assert curve["model"]["num_layers"] == 4
