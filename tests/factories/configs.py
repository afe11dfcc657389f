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


# ------------------------------------------------------------------ arch-vlm: per-layer designs and VLMs
# Tiny configs (32 wide, 4 blocks, 16-pixel vision towers) of the designs that index by layer outside their
# blocks and of the vision-language models scored on text (issue 25). Vocabulary 512: the byte-level tokenizer.
DESIGN_FAMILIES = ("gemma3n", "gemma4", "zamba2", "nemotron_h", "minimax")
VLM_FAMILIES = ("llava", "qwen2_5_vl", "qwen3_vl", "idefics3", "smolvlm", "paligemma")
_TEXT = dict(
    vocab_size=512, hidden_size=32, intermediate_size=64, num_hidden_layers=4, num_attention_heads=4,
    num_key_value_heads=2, max_position_embeddings=256, bos_token_id=1, eos_token_id=2, pad_token_id=0,
)  # fmt: skip
_VISION = dict(
    hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2, image_size=16, patch_size=8
)


def design_config(family: str):
    """A 4-block causal LM of a design that indexes by layer outside its blocks (see each comment)."""
    import transformers as tf

    pair = ["sliding_attention", "full_attention"] * 2
    per_layer = dict(vocab_size_per_layer_input=512, hidden_size_per_layer_input=8, num_kv_shared_layers=0)
    if family == "gemma3n":  # per-layer inputs: one embedding slice per layer, reshaped with the layer count
        return tf.Gemma3nTextConfig(
            **_TEXT, head_dim=8, sliding_window=8, layer_types=pair, **per_layer, altup_num_inputs=2, laurel_rank=4,
            activation_sparsity_pattern=[0.0] * 4, architectures=["Gemma3nForCausalLM"],
        )  # fmt: skip
    if family == "gemma4":  # per-layer inputs, and per_layer_config keyed by layer index
        return tf.Gemma4TextConfig(
            **_TEXT, head_dim=8, sliding_window=8, layer_types=pair, **per_layer,
            per_layer_config={"01": {"head_dim": 16}, "03": {"head_dim": 16}}, architectures=["Gemma4ForCausalLM"],
        )  # fmt: skip
    if family == "zamba2":  # a shared transformer block on the hybrid layers, its adapters looked up by layer
        return tf.Zamba2Config(
            **{**_TEXT, "num_key_value_heads": 4}, layers_block_type=["mamba", "hybrid"] * 2, mamba_d_state=4,
            mamba_d_conv=4, mamba_expand=2, mamba_ngroups=1, n_mamba_heads=2, chunk_size=16, num_mem_blocks=1,
            architectures=["Zamba2ForCausalLM"],
        )  # fmt: skip
    if family == "nemotron_h":  # one block type per layer (the model reads each block's `block_type`)
        fields = {k: v for k, v in _TEXT.items() if k != "num_hidden_layers"}
        return tf.NemotronHConfig(
            **fields, layers_block_type=["mamba", "attention", "mlp", "moe"], head_dim=8, ssm_state_size=4,
            mamba_num_heads=4, mamba_head_dim=8, n_groups=1, chunk_size=16, n_routed_experts=2, n_shared_experts=1,
            moe_intermediate_size=16, moe_shared_expert_intermediate_size=16, num_experts_per_tok=1,
            architectures=["NemotronHForCausalLM"],
        )  # fmt: skip
    if family == "minimax":  # lightning attention whose decay rates derive from the layer index and depth
        return tf.MiniMaxConfig(
            **_TEXT, head_dim=8, num_local_experts=2, num_experts_per_tok=1, block_size=4,
            layer_types=["full_attention", "linear_attention"] * 2, architectures=["MiniMaxForCausalLM"],
        )  # fmt: skip
    raise ValueError(family)


def kv_sharing_config(family: str, layer_types: list[str], shared: int):
    """Gemma-3n / Gemma-4 of `design_config` with its last `shared` blocks reusing earlier keys and values.

    One head size for every block (a sharing block must read keys and values of its own head size): no
    per-layer overrides, Gemma-4's full-attention head size that of the others.
    """
    fields = design_config(family).to_dict()
    fields.update(layer_types=layer_types, num_kv_shared_layers=shared)
    if family == "gemma4":  # none, rather than the head size of 512 it would derive for full attention
        fields["per_layer_config"] = {}
    return type(design_config(family)).from_dict(fields)


def vlm_config(family: str):
    """A vision-language model with a 4-block language model and a 2-block 16-pixel vision tower."""
    import transformers as tf

    qwen_vision = dict(depth=2, hidden_size=16, intermediate_size=32, num_heads=2, out_hidden_size=32, patch_size=4,
                       spatial_merge_size=2, temporal_patch_size=2)  # fmt: skip
    qwen_tokens = dict(image_token_id=3, video_token_id=4, vision_start_token_id=5)
    if family == "llava":
        clip = dict(model_type="clip_vision_model", projection_dim=16, **_VISION)
        return tf.LlavaConfig(text_config=dict(model_type="llama", **_TEXT), vision_config=clip, image_token_index=3,
                              architectures=["LlavaForConditionalGeneration"])  # fmt: skip
    if family == "qwen2_5_vl":  # multimodal rotary sections that add up to head_dim / 2
        rope = dict(rope_type="default", mrope_section=[2, 1, 1], rope_theta=10000.0)
        return tf.Qwen2_5_VLConfig(
            text_config=dict(model_type="qwen2_5_vl_text", **_TEXT, rope_parameters=rope),
            vision_config=dict(window_size=8, fullatt_block_indexes=[1], **qwen_vision), **qwen_tokens,
            architectures=["Qwen2_5_VLForConditionalGeneration"],
        )  # fmt: skip
    if family == "qwen3_vl":
        return tf.Qwen3VLConfig(
            text_config=dict(**_TEXT, head_dim=8),
            vision_config=dict(num_position_embeddings=16, deepstack_visual_indexes=[1], **qwen_vision),
            **qwen_tokens, architectures=["Qwen3VLForConditionalGeneration"],
        )  # fmt: skip
    if family in ("idefics3", "smolvlm"):
        config_class = tf.Idefics3Config if family == "idefics3" else tf.SmolVLMConfig
        architecture = "Idefics3ForConditionalGeneration" if family == "idefics3" else "SmolVLMForConditionalGeneration"
        return config_class(text_config=dict(model_type="llama", **_TEXT), vision_config=_VISION, scale_factor=1,
                            image_token_id=3, architectures=[architecture])  # fmt: skip
    if family == "paligemma":
        return tf.PaliGemmaConfig(
            text_config=dict(model_type="gemma", **_TEXT, head_dim=8), vision_config=dict(projection_dim=32, **_VISION),
            image_token_index=3, projection_dim=32, architectures=["PaliGemmaForConditionalGeneration"],
        )  # fmt: skip
    raise ValueError(family)
