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
        "--new-tokens", 8, "--repeats", 3, "--quiet",
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


@pytest.mark.slow
def test_a_decode_time_lost_in_noise_is_refused_and_the_hint_measures_it(tmp_path, monkeypatch):
    """generate ≤ prefill in a round (a loaded machine, few new tokens): one line, not a speed of 4e9 tok/s."""
    import re

    import layerprobe.heal.gain as gain

    source = build_checkpoint("llama", tmp_path / "src", num_layers=2)
    measured = gain._one_run

    def noisy(*args, **kwargs):
        run = measured(*args, **kwargs)
        return {**run, "generate_seconds": run["prefill_seconds"] * 0.9}

    args = ("gain", source, source, "--device", "cpu", "--prompt-tokens", 16, "--new-tokens", 2, "--repeats", 1)
    with monkeypatch.context() as patched:
        patched.setattr(gain, "_one_run", noisy)
        refused = invoke(*args, "--out", tmp_path / "refused", "--quiet", env={"COLUMNS": "250"})
    assert refused.exit_code == 2 and "decode speed is not measurable" in refused.output, refused.output
    assert not (tmp_path / "refused" / "gain.json").exists()
    hint = re.search(r"--new-tokens (\d+)", refused.output.splitlines()[-1])
    assert hint is not None
    tried = invoke(*args[:-4], "--new-tokens", hint.group(1), "--repeats", 1, "--out", tmp_path / "out", "--quiet")
    assert tried.exit_code == 0, tried.output
    decode = json.loads((tmp_path / "out" / "gain.json").read_text())["models"][0]["decode_tokens_per_second"]
    assert all(0 < speed < 1e7 for speed in decode)
