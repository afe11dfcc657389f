"""The files an export writes besides the weights: the source's other files, and mergekit's slices."""

from __future__ import annotations

import shutil

import transformers as tf
import yaml

from layerprobe.core import ExportSpec, ModelSpec
from layerprobe.export.save import run_export


def test_mergekit_yaml_slices_are_the_kept_blocks(export_sources, tmp_path):
    path = tmp_path / "merge.yaml"
    result = run_export(
        ExportSpec(
            ModelSpec(str(export_sources("llama"))), str(tmp_path / "out"), remove="1-2,4", mergekit_yaml=str(path)
        )
    )
    config = yaml.safe_load(path.read_text())
    assert config["merge_method"] == "passthrough"
    layers = []
    for piece in config["slices"]:
        (source,) = piece["sources"]
        assert source["model"] == str(export_sources("llama"))
        start, end = source["layer_range"]
        layers += range(start, end)  # mergekit's layer_range is half-open
    assert layers == result.kept == [0, 3, 5]


def test_other_source_files_are_copied_but_not_weights_or_card(export_sources, tmp_path):
    source = tmp_path / "src"
    shutil.copytree(export_sources("llama"), source)
    (source / "1_Pooling").mkdir()
    (source / "1_Pooling" / "config.json").write_text('{"pooling_mode_mean_tokens": true}')
    (source / "modules.json").write_text("[]")
    (source / "README.md").write_text("card of the full model")
    (source / "pytorch_model.bin").write_bytes(b"old weights")
    result = run_export(ExportSpec(ModelSpec(str(source)), str(tmp_path / "out"), remove="1"))
    out = tmp_path / "out"
    assert (out / "1_Pooling" / "config.json").read_text() == '{"pooling_mode_mean_tokens": true}'
    assert (out / "modules.json").is_file() and not (out / "README.md").exists()
    assert not (out / "pytorch_model.bin").exists()
    assert sorted(result.record["copied_files"]) == ["1_Pooling/config.json", "modules.json"]
    assert tf.AutoConfig.from_pretrained(out).num_hidden_layers == 5  # the written config, not the source's
