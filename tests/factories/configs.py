"""Configs of the small models the tests build in memory: 32 wide, 4 blocks unless asked, one per family.

`small_config` covers every family the ablation, placement, export and stack tests build (each with the
layer pattern that makes it interesting: sliding windows, sparse blocks, parallel residuals, …);
`tiny_config` (checkpoints.py) stays the recipe of the session's saved checkpoints.
"""

from __future__ import annotations

# DeepSeek-V3's mixture of experts and latent attention, shared by its small config and its session checkpoint.
DEEPSEEK_MOE = dict(
    num_attention_heads=4,
    num_key_value_heads=4,
    n_routed_experts=4,
    num_experts_per_tok=2,
    n_shared_experts=1,
    n_group=1,
    topk_group=1,
    kv_lora_rank=16,
    qk_rope_head_dim=8,
    qk_nope_head_dim=8,
    v_head_dim=8,
)


def small_config(
    family: str, *, num_layers: int = 4, vocab_size: int = 128, positions: int = 64, sliding_window: int = 3, **extra
):
    """The `transformers` config of a small `family` model; `extra` adds or overrides config fields.

    The comments say what each family brings: the pattern its blocks follow or the wiring it stands for.
    """
    import transformers as tf

    common = dict(
        vocab_size=vocab_size, num_hidden_layers=num_layers, max_position_embeddings=positions, bos_token_id=1,
        eos_token_id=2,
    )  # fmt: skip
    attention = dict(hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2, **common)
    narrow = dict(hidden_size=32, intermediate_size=64, num_attention_heads=4, **common)
    families = {
        "llama": (tf.LlamaConfig, attention),  # dense Pre-LN
        "mistral": (tf.MistralConfig, dict(sliding_window=sliding_window, **attention)),
        # sliding window on blocks >= max_window_layers, listed in layer_types
        "qwen3": (
            tf.Qwen3Config,
            dict(head_dim=8, use_sliding_window=True, sliding_window=sliding_window, max_window_layers=2, **attention),
        ),
        # alternating sliding / full attention, norms after each sublayer too (sandwich)
        "gemma2": (tf.Gemma2Config, dict(head_dim=8, sliding_window=sliding_window, **attention)),
        # one full layer in `sliding_window_pattern`, listed in layer_types
        "gemma3_text": (
            tf.Gemma3TextConfig,
            dict(head_dim=8, sliding_window=sliding_window, sliding_window_pattern=3, **attention),
        ),
        # sparse iff (i+1) % decoder_sparse_step == 0 and i not in mlp_only_layers: routed + gated shared expert
        "qwen2_moe": (
            tf.Qwen2MoeConfig,
            dict(
                moe_intermediate_size=16,
                shared_expert_intermediate_size=32,
                num_experts=4,
                num_experts_per_tok=2,
                decoder_sparse_step=2,
                **attention,
            ),
        ),
        "qwen3_moe": (
            tf.Qwen3MoeConfig,
            dict(
                head_dim=8,
                moe_intermediate_size=16,
                num_experts=4,
                num_experts_per_tok=2,
                decoder_sparse_step=1,
                **attention,
            ),
        ),
        # the first `first_k_dense_replace` blocks dense, then MoE
        "deepseek_v3": (
            tf.DeepseekV3Config,
            dict(
                hidden_size=32,
                intermediate_size=64,
                moe_intermediate_size=16,
                first_k_dense_replace=2,
                q_lora_rank=16,
                **DEEPSEEK_MOE,
                **common,
            ),
        ),
        # MoE every other block; its causal LM names a base-model prefix it does not have
        "llama4_text": (
            tf.Llama4TextConfig,
            dict(
                hidden_size=32,
                intermediate_size=32,
                intermediate_size_mlp=64,
                num_attention_heads=4,
                num_key_value_heads=2,
                head_dim=8,
                num_local_experts=2,
                interleave_moe_layer_step=2,
                pad_token_id=0,
                architectures=["Llama4ForCausalLM"],
                **common,
            ),
        ),
        "gpt_neox": (tf.GPTNeoXConfig, narrow),  # parallel residual (attention and MLP both read the block input)
        "phi": (tf.PhiConfig, narrow),  # one shared input norm feeds attention and MLP, both added to x
        # Pre-LN with biases and Conv1D projections
        "gpt2": (
            tf.GPT2Config,
            dict(n_layer=num_layers, n_embd=32, n_head=4, n_positions=positions, vocab_size=vocab_size),
        ),
        "gptj": (
            tf.GPTJConfig,
            dict(n_embd=32, n_head=4, n_layer=num_layers, vocab_size=vocab_size, n_positions=positions, rotary_dim=4),
        ),
        # a Post-LN decoder (Pre-LN with do_layer_norm_before=True)
        "opt": (
            tf.OPTConfig,
            dict(hidden_size=32, ffn_dim=64, num_attention_heads=4, word_embed_proj_dim=32, **common),
        ),
        "bert": (tf.BertConfig, narrow),  # Post-LN encoders
        "roberta": (tf.RobertaConfig, narrow),
        # one layer's weights shared across the depth
        "albert": (
            tf.AlbertConfig,
            dict(
                vocab_size=vocab_size,
                embedding_size=16,
                hidden_size=32,
                intermediate_size=64,
                num_attention_heads=4,
                num_hidden_layers=num_layers,
            ),
        ),
        # layers_block_type cycles through block_types
        "recurrent_gemma": (
            tf.RecurrentGemmaConfig,
            dict(
                num_hidden_layers=num_layers,
                vocab_size=vocab_size,
                hidden_size=32,
                intermediate_size=48,
                num_attention_heads=4,
                num_key_value_heads=1,
                head_dim=8,
                lru_width=32,
                attention_window_size=8,
                conv1d_width=4,
            ),
        ),
    }
    if family not in families:
        raise ValueError(family)
    config_class, fields = families[family]
    return config_class(**{**fields, **extra})


def jamba_config(
    num_layers: int, period: int, offset: int, *, vocab_size: int = 512, intermediate_size: int = 48, **extra
):
    """A small Jamba: attention and experts on the blocks i with i % period == offset, Mamba elsewhere.

    Jamba derives its per-layer pattern from period and offset (no per-layer list), so removing a block
    must pin the pattern of the kept ones.
    """
    import transformers as tf

    return tf.JambaConfig(
        vocab_size=vocab_size, hidden_size=32, intermediate_size=intermediate_size, num_attention_heads=4,
        num_key_value_heads=2, num_hidden_layers=num_layers, num_experts=2, num_experts_per_tok=1,
        attn_layer_period=period, attn_layer_offset=offset, expert_layer_period=period, expert_layer_offset=offset,
        use_mamba_kernels=False, mamba_d_state=4, mamba_d_conv=4, mamba_expand=2, pad_token_id=0, bos_token_id=1,
        eos_token_id=2, architectures=["JambaForCausalLM"], **extra,
    )  # fmt: skip


def export_config(family: str):
    """The 6-block config of `family` whose layer pattern an export must rewrite (see each family's comment)."""
    if family == "jamba":  # attention and experts on odd blocks: removing block 0 shifts the offset
        return jamba_config(6, 2, 1, intermediate_size=64, max_position_embeddings=256)
    extra = {
        "qwen2_moe": {"mlp_only_layers": [3]},  # sparse blocks 1 and 5
        "qwen3_moe": {"mlp_only_layers": [0, 4]},
    }.get(family, {})
    return small_config(family, num_layers=6, vocab_size=512, positions=256, sliding_window=4, **extra)
