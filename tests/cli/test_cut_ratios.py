"""`prune --save` prints at once what the cut buys (parameters, weight bytes) and points to `gain` for speed."""

from __future__ import annotations

import re

import pytest
import transformers as tf
from command_line import invoke
from factories import build_checkpoint


@pytest.mark.slow  # a save and two loads: seconds on 2 cores
def test_prune_prints_parameter_and_byte_ratios_and_points_to_gain(tmp_path):
    source = build_checkpoint("llama", tmp_path / "src", num_layers=4)
    saved = tmp_path / "pruned"
    result = invoke("prune", source, "--remove", "1-2", "--save", saved)
    assert result.exit_code == 0, result.output
    before = tf.AutoModelForCausalLM.from_pretrained(source).num_parameters()
    after = tf.AutoModelForCausalLM.from_pretrained(saved).num_parameters()
    old = sum(f.stat().st_size for f in source.glob("*.safetensors"))
    new = sum(f.stat().st_size for f in saved.glob("*.safetensors"))
    text = " ".join(result.output.split())
    assert f"parameters {before:,} → {after:,} ({after / before:.1%})" in text
    match = re.search(r"weight bytes \S+ \S+ → \S+ \S+ \(([\d.]+)%\)", text)
    assert match and float(match.group(1)) == round(100 * new / old, 1)
    assert f"layerprobe gain {source} {saved} --out DIR" in text
