import pytest
import torch
import transformers as tf

from layerprobe.errors import ModelNotFound, UnsupportedModel
from layerprobe.models import CAUSAL_LM, ENCODER, EXTRACTIVE_QA, load_model, model_kind, resolve_dtype
from layerprobe.specs import ModelSpec


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
    from layerprobe.errors import LayerprobeError

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
