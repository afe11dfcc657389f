"""`layerprobe gain` on a tiny LLaMA and its pruned copy: sizes against the test's own counts, ratios from the runs."""

from __future__ import annotations

import json

import numpy as np
import pytest
import transformers as tf
from command_line import invoke
from factories import build_checkpoint

from layerprobe.results import read_gain


@pytest.mark.slow
def test_gain_sizes_and_ratios(tmp_path):
    source = build_checkpoint("llama", tmp_path / "src", num_layers=4)
    pruned = tmp_path / "pruned"
    assert invoke("prune", source, "--remove", "1-2", "--save", pruned, "--quiet").exit_code == 0
    result = invoke(
        "gain", source, pruned, "--out", tmp_path / "out", "--device", "cpu", "--prompt-tokens", 16,
        "--new-tokens", 4, "--repeats", 3, "--quiet",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "out" / "gain.json").read_text())
    read_gain(tmp_path / "out" / "gain.json")
    original, candidate = data["models"]
    for entry, path in ((original, source), (candidate, pruned)):
        assert entry["parameters"] == tf.AutoModelForCausalLM.from_pretrained(path).num_parameters()
        assert entry["bytes_on_disk"] == sum(f.stat().st_size for f in path.glob("*.safetensors"))
        assert len(entry["prefill_tokens_per_second"]) == 3 and len(entry["decode_tokens_per_second"]) == 3
    ratios = candidate["ratios"]
    assert ratios["parameters"] == candidate["parameters"] / original["parameters"] < 1
    assert ratios["bytes_on_disk"] == candidate["bytes_on_disk"] / original["bytes_on_disk"]
    for key in ("prefill_tokens_per_second", "decode_tokens_per_second"):
        per_round = np.asarray(candidate[key]) / np.asarray(original[key])
        assert ratios[key]["median"] == float(np.median(per_round))
        low, high = ratios[key]["spread"]
        assert low <= ratios[key]["median"] <= high
    assert ratios["peak_memory_bytes"] is None  # not measured on CPU
    assert (tmp_path / "out" / "gain.png").is_file()
    assert "prefill" in result.output


def test_gain_needs_a_candidate(tmp_path):
    result = invoke("gain", tmp_path, "--out", tmp_path / "out")
    assert result.exit_code == 2 and "at least one candidate" in result.output
