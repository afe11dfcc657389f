"""The files an export writes besides the weights: the source's other files, and mergekit's slices."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import transformers as tf
import yaml

from layerprobe.core import ExportSpec, ModelSpec
from layerprobe.export.files import copy_other_files
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


def test_only_regular_files_inside_the_checkpoint_are_copied(export_sources, tmp_path):
    source, outside = tmp_path / "src", tmp_path / "outside"
    shutil.copytree(export_sources("llama"), source)
    outside.mkdir()
    (outside / "secret.txt").write_text("not part of the model")
    (outside / "folder").mkdir()
    (outside / "folder" / "more.txt").write_text("nor this")
    (source / "modules.json").write_text("[]")
    (source / "leak.json").symlink_to(outside / "secret.txt")
    (source / "alias.json").symlink_to(source / "modules.json")  # a link inside the checkpoint: its content
    (source / "linked").symlink_to(outside / "folder", target_is_directory=True)
    os.mkfifo(source / "pipe")  # copying a pipe would wait forever
    result = run_export(ExportSpec(ModelSpec(str(source)), str(tmp_path / "out"), remove="1"))
    out = tmp_path / "out"
    assert (out / "alias.json").read_text() == "[]" and not (out / "alias.json").is_symlink()
    assert not (out / "leak.json").exists() and not (out / "linked").exists() and not (out / "pipe").exists()
    assert sorted(result.record["copied_files"]) == ["alias.json", "modules.json"]
    skipped = result.record["skipped_files"]
    assert [s.split(" ")[0] for s in skipped] == ["linked", "leak.json", "pipe"]
    assert str(outside / "secret.txt") in skipped[1] and "out of the checkpoint" in skipped[1]
    (note,) = [n for n in result.notes if n.startswith("not copied")]
    assert all(s in note for s in skipped) and "\n" not in note


def test_a_hub_snapshot_keeps_its_links_into_its_own_blobs(tmp_path):
    snapshot = tmp_path / "models--org--tiny" / "snapshots" / "abc123"
    blobs = tmp_path / "models--org--tiny" / "blobs"
    snapshot.mkdir(parents=True)
    blobs.mkdir()
    (blobs / "f00d").write_text('{"pooling_mode_mean_tokens": true}')
    (snapshot / "pooling.json").symlink_to(Path("..", "..", "blobs", "f00d"))
    out = tmp_path / "out"
    out.mkdir()
    copied, skipped = copy_other_files(snapshot, out)
    assert copied == ["pooling.json"] and skipped == []
    assert (out / "pooling.json").read_text() == '{"pooling_mode_mean_tokens": true}'


def test_mergekit_yaml_gives_back_any_model_path_exactly(export_sources, tmp_path):
    source = tmp_path / "we\"ird\nmodel: other' #path"
    shutil.copytree(export_sources("llama"), source)
    path = tmp_path / "merge.yaml"
    run_export(ExportSpec(ModelSpec(str(source)), str(tmp_path / "out"), remove="0,5", mergekit_yaml=str(path)))
    text = path.read_text()
    config = yaml.safe_load(text)
    assert [piece["sources"][0]["model"] for piece in config["slices"]] == [str(source)]
    assert config["slices"][0]["sources"][0]["layer_range"] == [1, 5] and config["merge_method"] == "passthrough"
    assert set(config) == {"slices", "merge_method", "dtype"}
    comments = [line for line in text.splitlines() if line.startswith("#")]
    assert len(comments) == 2 and "\\n" in comments[0]  # the newline is escaped in the comment, not a new line
