import pytest
import torch
import transformers as tf

from layerprobe.core import ModelSpec
from layerprobe.core.errors import ModelNotFound, UnsupportedModel
from layerprobe.model import CAUSAL_LM, ENCODER, EXTRACTIVE_QA, load_model, model_kind
from layerprobe.model.devices import resolve_dtype


@pytest.mark.parametrize(
    ("arch", "kind"),
    [
        ("llama", CAUSAL_LM),
        ("qwen3", CAUSAL_LM),
        ("gpt2", CAUSAL_LM),
        ("deepseek_v3", CAUSAL_LM),
        ("bert", ENCODER),
        ("bert_qa", EXTRACTIVE_QA),
    ],
)
def test_kind_comes_from_the_config(tiny_checkpoints, arch, kind):
    assert model_kind(tf.AutoConfig.from_pretrained(tiny_checkpoints[arch])) == kind


def test_kind_without_architectures():
    assert model_kind(tf.BertConfig()) == ENCODER
    assert model_kind(tf.LlamaConfig()) == CAUSAL_LM
    with pytest.raises(UnsupportedModel, match="encoder-decoder"):
        model_kind(tf.T5Config())


@pytest.mark.parametrize(("purpose", "expected"), [("base", "LlamaModel"), ("head", "LlamaForCausalLM")])
def test_load_purpose_picks_the_head(tiny_checkpoints, purpose, expected):
    loaded = load_model(ModelSpec(str(tiny_checkpoints["llama"]), device="cpu"), purpose=purpose)
    assert type(loaded.model).__name__ == expected
    assert loaded.kind == CAUSAL_LM and loaded.architecture == "LlamaForCausalLM" and loaded.dtype == "float32"
    assert not loaded.model.training and loaded.context_length == 256


def test_qa_checkpoint_loads_its_head(tiny_checkpoints):
    loaded = load_model(ModelSpec(str(tiny_checkpoints["bert_qa"]), device="cpu"), purpose="head")
    assert type(loaded.model).__name__ == "BertForQuestionAnswering" and loaded.kind == EXTRACTIVE_QA


def test_explicit_dtype(tiny_checkpoints):
    loaded = load_model(ModelSpec(str(tiny_checkpoints["gpt2"]), dtype="bfloat16", device="cpu"))
    assert next(loaded.model.parameters()).dtype == torch.bfloat16 and loaded.dtype == "bfloat16"


def test_auto_dtype_is_float32_on_cpu_and_checkpoint_half_on_gpu():
    config = tf.LlamaConfig(dtype="bfloat16")
    assert resolve_dtype("auto", config, torch.device("cpu")) == torch.float32
    assert resolve_dtype("auto", config, torch.device("cuda")) == torch.bfloat16
    assert resolve_dtype("float16", config, torch.device("cpu")) == torch.float16


@pytest.mark.parametrize(
    ("raised", "message", "hint"),
    [
        (
            OSError("You are trying to access a gated repo.\nMake sure to have access to it at https://hf.co/x."),
            "gated model",
            "licence",
        ),
        (
            ValueError(
                "The repository x contains custom code which must be executed. Please pass the argument "
                "`trust_remote_code=True` to allow custom code to be run."
            ),
            "own modelling code",
            "--trust-remote-code",
        ),
        (
            OSError(
                "x is not a local folder and is not a valid model identifier listed on 'https://huggingface.co/models'"
            ),
            "Cannot load",
            "hub id",
        ),
        (
            OSError(
                "We couldn't connect to 'https://huggingface.co' to load the files, and couldn't find them in the "
                "cached files."
            ),
            "cannot be reached",
            "local directory",
        ),
    ],
)
def test_loading_failures_become_one_line_errors(monkeypatch, raised, message, hint):
    def fail(*_args, **_kwargs):
        raise raised

    monkeypatch.setattr(tf.AutoConfig, "from_pretrained", fail)
    with pytest.raises(ModelNotFound, match=message) as info:
        load_model(ModelSpec("org/some-model"))
    assert hint in info.value.hint
    assert "\n" not in info.value.message


def test_cuda_asked_for_without_a_gpu(tiny_checkpoints):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    from layerprobe.core.errors import LayerprobeError

    with pytest.raises(LayerprobeError, match="no CUDA GPU"):
        load_model(ModelSpec(str(tiny_checkpoints["gpt2"]), device="cuda"))


def test_bare_decoder_is_a_causal_family():
    assert model_kind(tf.LlamaConfig(architectures=["LlamaModel"])) == CAUSAL_LM
    assert model_kind(tf.BertConfig(architectures=["BertForSequenceClassification"])) == ENCODER
    with pytest.raises(UnsupportedModel, match="encoder-decoder"):
        model_kind(tf.T5Config(architectures=["T5ForConditionalGeneration"]))


def test_a_head_missing_from_the_checkpoint_is_refused(tiny_checkpoints, tmp_path):
    """A bare LlamaModel loaded for prune-drop would get a random LM head: its scores would mean nothing."""
    base = tf.AutoModel.from_pretrained(tiny_checkpoints["llama"])
    base.config.architectures = ["LlamaModel"]
    base.save_pretrained(tmp_path)
    tf.AutoTokenizer.from_pretrained(tiny_checkpoints["llama"]).save_pretrained(tmp_path)
    assert load_model(ModelSpec(str(tmp_path), device="cpu")).kind == CAUSAL_LM  # angular is fine
    with pytest.raises(UnsupportedModel, match="no trained LlamaForCausalLM head"):
        load_model(ModelSpec(str(tmp_path), device="cpu"), purpose="head")


# ------------------------------------------------------------ weights checked against config.json (issue 8)
def _copy_with_config(source, target, **changes):
    """A copy of a checkpoint directory whose config.json says something else."""
    import json
    import shutil

    shutil.copytree(source, target)
    config = json.loads((target / "config.json").read_text())
    config.update(changes)
    (target / "config.json").write_text(json.dumps(config))
    return target


def _no_weight_loading(monkeypatch):
    """Make any weight load fail loudly: the refusal must come before it."""

    def fail(*_args, **_kwargs):
        raise AssertionError("weights were loaded before the mismatch was refused")

    for cls in (tf.AutoModel, tf.AutoModelForCausalLM, tf.AutoModelForQuestionAnswering):
        monkeypatch.setattr(cls, "from_pretrained", fail)


def _no_header_check(monkeypatch):
    """Files the pre-check cannot see (a hub model not cached yet): only the after-load net remains."""
    monkeypatch.setattr("layerprobe.model.weights.checkpoint_shapes", lambda _spec: {})


@pytest.mark.parametrize(
    ("arch", "purpose", "layers", "expected"),
    [
        ("llama", "base", 6, r"describes 6 blocks.*hold 4 block\(s\) \(0-3\).*4, 5 would be randomly initialised"),
        ("llama", "head", 6, r"4, 5 would be randomly initialised.*missing: layers\.4\."),
        ("llama", "head", 2, r"2, 3 would be dropped and a truncated model.*unexpected: model\.layers\.2\."),
        ("gpt2", "base", 2, r"2, 3 would be dropped"),
        ("bert_qa", "head", 6, r"encoder.layer.*4, 5 would be randomly initialised"),
    ],
)
def test_config_that_disagrees_with_the_weights_is_refused_before_loading(
    tiny_checkpoints, tmp_path, monkeypatch, arch, purpose, layers, expected
):
    from layerprobe.model.weights import WeightsMismatch

    key = "n_layer" if arch == "gpt2" else "num_hidden_layers"
    path = _copy_with_config(tiny_checkpoints[arch], tmp_path / "ckpt", **{key: layers})
    _no_weight_loading(monkeypatch)
    with pytest.raises(WeightsMismatch, match=expected) as info:
        load_model(ModelSpec(str(path), device="cpu"), purpose=purpose)
    assert "num_hidden_layers" in info.value.hint and "\n" not in info.value.message


@pytest.mark.parametrize(("layers", "word"), [(6, "missing"), (2, "but not in the model")])
@pytest.mark.parametrize("purpose", ["base", "head"])
def test_loading_info_catches_what_the_headers_could_not_show(
    tiny_checkpoints, tmp_path, monkeypatch, layers, word, purpose
):
    from layerprobe.model.weights import WeightsMismatch

    path = _copy_with_config(tiny_checkpoints["llama"], tmp_path / "ckpt", num_hidden_layers=layers)
    _no_header_check(monkeypatch)
    with pytest.raises(WeightsMismatch, match=rf"{word}.*layers\.[2-5]\."):
        load_model(ModelSpec(str(path), device="cpu"), purpose=purpose)


def test_a_block_missing_one_weight_is_refused(tiny_checkpoints, tmp_path):
    """Every block index is present, so only transformers' own missing-keys list can show the hole."""
    import shutil

    from safetensors.torch import load_file, save_file

    from layerprobe.model.weights import WeightsMismatch

    path = tmp_path / "ckpt"
    shutil.copytree(tiny_checkpoints["llama"], path)
    state = load_file(path / "model.safetensors")
    del state["model.layers.2.mlp.up_proj.weight"]
    save_file(state, path / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(WeightsMismatch, match=r"missing.*layers\.2\.mlp\.up_proj\.weight"):
        load_model(ModelSpec(str(path), device="cpu"))


def test_sharded_and_bin_checkpoints_are_checked_and_pass_when_they_agree(tiny_checkpoints, tmp_path, monkeypatch):
    from layerprobe.model.weights import WeightsMismatch, checkpoint_shapes

    model = tf.AutoModelForCausalLM.from_pretrained(tiny_checkpoints["llama"])
    tokenizer = tf.AutoTokenizer.from_pretrained(tiny_checkpoints["llama"])
    sharded, legacy = tmp_path / "sharded", tmp_path / "legacy"
    model.save_pretrained(sharded, max_shard_size="100KB")
    assert (sharded / "model.safetensors.index.json").exists()
    legacy.mkdir()
    model.config.save_pretrained(legacy)
    torch.save(model.state_dict(), legacy / "pytorch_model.bin")
    for path in (sharded, legacy):
        tokenizer.save_pretrained(path)
        shapes = checkpoint_shapes(ModelSpec(str(path)))
        assert shapes["model.layers.3.mlp.up_proj.weight"] == (96, 48) and len(shapes) == len(model.state_dict())
        assert load_model(ModelSpec(str(path), device="cpu"), purpose="head").model.config.num_hidden_layers == 4
        config = path / "config.json"
        config.write_text(config.read_text().replace('"num_hidden_layers": 4', '"num_hidden_layers": 5'))
    _no_weight_loading(monkeypatch)
    for path in (sharded, legacy):
        with pytest.raises(WeightsMismatch, match="block\\(s\\) 4 would be randomly initialised"):
            load_model(ModelSpec(str(path), device="cpu"))


@pytest.mark.parametrize("pre_check", [True, False])
def test_weights_of_the_wrong_shape_are_one_line(tiny_checkpoints, tmp_path, monkeypatch, pre_check):
    from layerprobe.model.weights import WeightsMismatch

    path = _copy_with_config(tiny_checkpoints["llama"], tmp_path / "ckpt", intermediate_size=80)
    if pre_check:
        _no_weight_loading(monkeypatch)
    else:
        _no_header_check(monkeypatch)
    with pytest.raises(WeightsMismatch, match="shape that config.json does not describe") as info:
        load_model(ModelSpec(str(path), device="cpu"))
    if pre_check:
        assert "mlp.gate_proj.weight is [96, 48] in the checkpoint but [80, 48]" in info.value.message


def _pickle_checkpoint(tiny_checkpoints, path):
    """A legacy pytorch_model.bin that also pickles a datetime: weights-only loading refuses it."""
    import datetime

    model = tf.AutoModelForCausalLM.from_pretrained(tiny_checkpoints["llama"])
    path.mkdir()
    model.config.save_pretrained(path)
    tf.AutoTokenizer.from_pretrained(tiny_checkpoints["llama"]).save_pretrained(path)
    torch.save({**model.state_dict(), "saved_at": datetime.datetime(2024, 1, 1)}, path / "pytorch_model.bin")
    return path


@pytest.mark.parametrize("pre_check", [True, False])
def test_an_unsafe_pickle_is_refused_with_how_to_convert_it(tiny_checkpoints, tmp_path, monkeypatch, pre_check):
    from layerprobe.core.errors import LayerprobeError

    path = _pickle_checkpoint(tiny_checkpoints, tmp_path / "ckpt")
    if not pre_check:
        _no_header_check(monkeypatch)
    with pytest.raises(LayerprobeError, match="refused for safety") as info:
        load_model(ModelSpec(str(path), device="cpu"))
    assert "safe_serialization=True" in info.value.hint


def test_a_corrupt_safetensors_header_is_one_red_line_exit_2(tiny_checkpoints, tmp_path):
    import shutil

    from typer.testing import CliRunner

    from layerprobe.cli.app import app

    path = tmp_path / "ckpt"
    shutil.copytree(tiny_checkpoints["llama"], path)
    (path / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all}")
    result = CliRunner().invoke(
        app, ["angular", str(path), "--dataset", "builtin:pydoc", "--tokens", "256", "--out", str(tmp_path / "o")]
    )  # a corpus big enough for --tokens: the corpus is checked (cheaply) before the weight files' headers
    assert result.exit_code == 2, result.output
    assert "not a valid safetensors file" in result.output and "Traceback" not in result.output
    assert "download it again" in result.output
    assert not (tmp_path / "o" / "angular.json").exists()


def test_a_tokenizer_without_eos_or_bos_is_refused_for_lm_eval_before_loading(tiny_checkpoints, tmp_path, monkeypatch):
    import shutil

    from layerprobe.core.errors import LayerprobeError

    path = tmp_path / "ckpt"
    shutil.copytree(tiny_checkpoints["llama"], path)
    original = tf.AutoTokenizer.from_pretrained(path)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        (path / name).unlink(missing_ok=True)
    tf.PreTrainedTokenizerFast(tokenizer_object=original.backend_tokenizer).save_pretrained(path)
    assert tf.AutoTokenizer.from_pretrained(path).eos_token_id is None
    assert load_model(ModelSpec(str(path), device="cpu")).kind == CAUSAL_LM  # angular needs no special token
    assert load_model(ModelSpec(str(path), device="cpu"), purpose="head").kind == CAUSAL_LM  # nor depth --grad
    _no_weight_loading(monkeypatch)
    with pytest.raises(LayerprobeError, match="neither an end-of-sequence nor a beginning-of-sequence") as info:
        load_model(ModelSpec(str(path), device="cpu"), purpose="head", lm_eval=True)
    assert "eos_token" in info.value.hint


def test_albert_is_refused_before_loading_without_a_path_that_cannot_work(tmp_path, monkeypatch):
    from factories import byte_level_tokenizer

    byte_level_tokenizer(add_bos=False).save_pretrained(tmp_path)
    config = tf.AlbertConfig(
        vocab_size=512, embedding_size=16, hidden_size=32, intermediate_size=64, num_attention_heads=4,
        num_hidden_layers=3, architectures=["AlbertModel"],
    )  # fmt: skip
    tf.AlbertModel(config).save_pretrained(tmp_path)
    _no_weight_loading(monkeypatch)
    for layers_path in (None, "encoder.albert_layer_groups"):
        with pytest.raises(UnsupportedModel, match="shares weights across its depth.*applied 3 times") as info:
            load_model(ModelSpec(str(tmp_path), device="cpu", layers_path=layers_path))
        assert "--layers-path" not in info.value.hint.replace("no --layers-path", "")


def test_weights_transformers_drops_on_purpose_are_not_a_mismatch(tiny_checkpoints, tmp_path):
    """DeepSeek-V3 checkpoints hold a multi-token-prediction module as block L (and 61 in the full model):
    declared by the config (num_nextn_predict_layers) or ignored by transformers, so never a mismatch."""
    import json
    import shutil

    from safetensors.torch import load_file, save_file

    from layerprobe.model.weights import WeightsMismatch

    path = tmp_path / "ckpt"
    shutil.copytree(tiny_checkpoints["deepseek_v3"], path)
    state = load_file(path / "model.safetensors")
    state["model.layers.61.eh_proj.weight"] = torch.zeros(4, 4)  # transformers' own ignore pattern
    state["model.layers.4.eh_proj.weight"] = torch.zeros(4, 4)  # the MTP block right after the stack
    save_file(state, path / "model.safetensors", metadata={"format": "pt"})
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**config, "num_nextn_predict_layers": 0}))
    with pytest.raises(WeightsMismatch, match=r"block\(s\) 4 would be dropped"):
        load_model(ModelSpec(str(path), device="cpu"))
    (path / "config.json").write_text(json.dumps({**config, "num_nextn_predict_layers": 1}))
    for purpose in ("base", "head"):
        assert load_model(ModelSpec(str(path), device="cpu"), purpose=purpose).model.config.num_hidden_layers == 4


def test_layers_command_refuses_a_config_that_disagrees_with_the_weights(tiny_checkpoints, tmp_path):
    from typer.testing import CliRunner

    from layerprobe.cli.app import app

    good = CliRunner().invoke(app, ["layers", str(tiny_checkpoints["llama"])])
    assert good.exit_code == 0 and "L = 4" in good.output
    path = _copy_with_config(tiny_checkpoints["llama"], tmp_path / "ckpt", num_hidden_layers=6)
    result = CliRunner().invoke(app, ["layers", str(path)])
    assert result.exit_code == 2 and "4, 5 would be randomly initialised" in result.output
    assert "Traceback" not in result.output


def test_a_cached_hub_checkpoint_is_checked_from_its_cached_files(tiny_checkpoints, tmp_path, monkeypatch):
    """A hub id is checked before loading when its files are in the local cache (nothing is downloaded)."""
    import shutil

    import huggingface_hub.constants as hub_constants

    from layerprobe.model.weights import checkpoint_shapes

    repo = tmp_path / "hub" / "models--org--tiny"
    snapshot = repo / "snapshots" / ("0" * 40)
    shutil.copytree(tiny_checkpoints["llama"], snapshot)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0" * 40)
    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    shapes = checkpoint_shapes(ModelSpec("org/tiny"))
    assert shapes["model.layers.3.mlp.up_proj.weight"] == (96, 48)
    assert checkpoint_shapes(ModelSpec("org/not-cached")) == {}
