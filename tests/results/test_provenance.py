"""Which model a result measured, and how it was loaded: older files read back, quantized ones are labelled."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from layerprobe.cli.app import app
from layerprobe.cli.console import out
from layerprobe.cli.summaries import print_angular_summary
from layerprobe.core import BUILTIN_CORPUS
from layerprobe.plots.heatmap import angular_figure
from layerprobe.results import AngularResult, load_result

runner = CliRunner()


def measured(checkpoint, out) -> dict:
    """The angular.json of a short `layerprobe angular` run of `checkpoint`, read as JSON."""
    args = ["angular", str(checkpoint), "--dataset", BUILTIN_CORPUS, "--tokens", "128", "--seq-len", "64"]
    result = runner.invoke(app, [*args, "--device", "cpu", "--quiet", "--out", str(out)])
    assert result.exit_code == 0, result.output
    return json.loads((out / "angular.json").read_text())


def test_old_results_without_loading_fields_still_read(tiny_checkpoints, tmp_path):
    data = measured(tiny_checkpoints["gpt2"], tmp_path)
    for key in ("quantization", "attn_implementation", "model_args"):
        del data["model"][key]
    (tmp_path / "old.json").write_text(json.dumps(data))
    old = load_result(tmp_path / "old.json")
    assert old.model.quantization is None and old.model.model_args == {} and old.model.attn_implementation is None
    assert old.model.label == old.model.id


def test_quantized_results_are_labelled(tiny_checkpoints, tmp_path):
    data = measured(tiny_checkpoints["gpt2"], tmp_path)
    data["model"]["quantization"] = "bitsandbytes-4bit-nf4"
    quantized = AngularResult.from_dict(data)
    assert quantized.to_dict()["model"]["quantization"] == "bitsandbytes-4bit-nf4"
    assert "(bitsandbytes-4bit-nf4)" in quantized.model.label
    assert "bitsandbytes-4bit-nf4" in angular_figure(quantized).axes[0].get_title()
    plain = load_result(tmp_path / "angular.json")
    assert "bitsandbytes" not in angular_figure(plain).axes[0].get_title()

    with out.capture() as captured:
        print_angular_summary(quantized)
    assert "bitsandbytes-4bit-nf4" in captured.get()
