"""Tiny checkpoints of the tower families (ViT, CLIP, SigLIP, PaliGemma, mllama, Gemma-3n) and image folders.

Gemma-3n is its text model alone (its AltUp streams); the others' vision towers are measured on the folders.

Every checkpoint is saved with its own image processor (what a user's checkpoint ships), sized for 32×32
images cut in 8×8 patches: 16 patches (+1 CLS where the family has one) per image.
"""

from __future__ import annotations

from pathlib import Path

IMAGE_SIZE, PATCH_SIZE = 32, 8
MLLAMA_CROSS = (2,)  # the tiny mllama's cross-attention blocks (of 4 text blocks)
TOWER_FAMILIES = ("vit", "clip", "siglip", "paligemma", "mllama", "gemma3n")

_VISION = dict(
    hidden_size=32,
    intermediate_size=64,
    num_attention_heads=4,
    num_hidden_layers=4,
    image_size=IMAGE_SIZE,
    patch_size=PATCH_SIZE,
)


def _text(vocab_size: int, num_layers: int = 3) -> dict:
    return dict(
        vocab_size=vocab_size,
        hidden_size=32,
        intermediate_size=64,
        num_attention_heads=4,
        num_hidden_layers=num_layers,
        max_position_embeddings=64,
    )


def tower_model(family: str, vocab_size: int = 512):
    """The random model of `family` (seeded; norm gains random) and its image processor (None: text only)."""
    import torch
    import transformers as tf

    from factories.checkpoints import randomize_norms

    torch.manual_seed(0)
    square = {"height": IMAGE_SIZE, "width": IMAGE_SIZE}
    if family == "vit":
        model = tf.ViTModel(tf.ViTConfig(**_VISION, architectures=["ViTModel"]))
        processor = tf.ViTImageProcessor(size=square)
    elif family == "vit_classifier":  # a ViT that ships its class head (initialised wide: peaked logits)
        config = tf.ViTConfig(
            **_VISION, num_labels=10, initializer_range=0.2, architectures=["ViTForImageClassification"]
        )
        model = tf.ViTForImageClassification(config)
        processor = tf.ViTImageProcessor(size=square)
    elif family == "clip":
        text = dict(_text(vocab_size), bos_token_id=1, eos_token_id=2, pad_token_id=0)
        config = tf.CLIPConfig(text_config=text, vision_config=dict(_VISION), projection_dim=16)
        model = tf.CLIPModel(config)
        processor = tf.CLIPImageProcessor(size={"shortest_edge": IMAGE_SIZE}, crop_size=square)
    elif family == "siglip":
        config = tf.SiglipConfig(text_config=_text(vocab_size), vision_config=dict(_VISION))
        model = tf.SiglipModel(config)
        processor = tf.SiglipImageProcessor(size=square)
    elif family == "paligemma":
        vision = dict(_VISION, projection_dim=32)
        text = dict(_text(vocab_size, 2), model_type="gemma", head_dim=8, num_key_value_heads=1)
        config = tf.PaliGemmaConfig(
            vision_config=vision, text_config=text, image_token_index=vocab_size - 1, vocab_size=vocab_size,
            projection_dim=32, hidden_size=32, architectures=["PaliGemmaForConditionalGeneration"],
        )  # fmt: skip
        model = tf.PaliGemmaForConditionalGeneration(config)
        processor = tf.SiglipImageProcessor(size=square)
    elif family == "mllama":
        vision = dict(
            hidden_size=32, intermediate_size=64, attention_heads=4, num_hidden_layers=2, num_global_layers=1,
            image_size=IMAGE_SIZE, patch_size=PATCH_SIZE, max_num_tiles=1, vision_output_dim=64,
            intermediate_layers_indices=[0], supported_aspect_ratios=[[1, 1]],
        )  # fmt: skip
        text = dict(
            _text(vocab_size + 8, 4), num_key_value_heads=2, cross_attention_layers=list(MLLAMA_CROSS),
            bos_token_id=1, eos_token_id=2, pad_token_id=0,
        )  # fmt: skip
        config = tf.MllamaConfig(
            vision_config=vision, text_config=text, image_token_index=vocab_size + 1,
            architectures=["MllamaForConditionalGeneration"],
        )  # fmt: skip
        model = tf.MllamaForConditionalGeneration(config)
        processor = tf.MllamaImageProcessor(size=square, max_image_tiles=1)
    elif family == "gemma3n":
        config = tf.Gemma3nTextConfig(
            **_text(vocab_size, 2), num_key_value_heads=2, head_dim=8, hidden_size_per_layer_input=8,
            vocab_size_per_layer_input=vocab_size, laurel_rank=4, altup_num_inputs=2, num_kv_shared_layers=0,
            activation_sparsity_pattern=[0.0, 0.0], layer_types=["sliding_attention", "full_attention"],
            sliding_window=8, bos_token_id=1, eos_token_id=2, pad_token_id=0,
            architectures=["Gemma3nForCausalLM"],
        )  # fmt: skip
        model = tf.Gemma3nForCausalLM(config)
        processor = None
    else:
        raise ValueError(family)
    randomize_norms(model, lambda name: "norm" in name.lower())
    return model.eval(), processor


def build_tower_checkpoint(family: str, directory: Path) -> Path:
    """Save the tiny `family` checkpoint with its image processor and (if it reads text) a byte-level tokenizer."""
    from factories.checkpoints import byte_level_tokenizer

    tokenizer = byte_level_tokenizer(add_bos=True)
    model, processor = tower_model(family, len(tokenizer))
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory)
    if not family.startswith("vit"):  # ViT reads images only: it ships no tokenizer, like google/vit-base-patch16-224
        tokenizer.save_pretrained(directory)
    if processor is not None:
        processor.save_pretrained(directory)
    return directory


def write_image_folder(directory: Path, count: int = 6, size: int = 40, seed: int = 0) -> Path:
    """`count` small RGB images (random noise over smooth gradients: no two alike) in PNG and JPEG files."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    directory.mkdir(parents=True, exist_ok=True)
    ramp = np.linspace(0, 255, size)
    for index in range(count):
        base = np.stack([np.add.outer(ramp * (c + 1) / 3, ramp * (index % 3) / 2) % 256 for c in range(3)], -1)
        pixels = np.clip(base + rng.normal(0, 40, base.shape), 0, 255).astype("uint8")
        suffix = "png" if index % 2 == 0 else "jpg"
        Image.fromarray(pixels).save(directory / f"image_{index:02d}.{suffix}")
    return directory


def mllama_without(model, kept: list[int]):
    """The same model with only `kept` text blocks: its config written here, the weights copied by name."""
    import re

    import transformers as tf

    config = model.config.to_dict()
    text = config["text_config"]
    text["num_hidden_layers"] = len(kept)
    text["cross_attention_layers"] = [new for new, old in enumerate(kept) if old in MLLAMA_CROSS]
    target = tf.MllamaForConditionalGeneration(tf.MllamaConfig.from_dict(config)).eval()
    source = model.state_dict()
    state = {}
    for name in target.state_dict():
        old = name
        if "language_model.layers." in name:
            old = re.sub(r"layers\.(\d+)\.", lambda m: f"layers.{kept[int(m.group(1))]}.", name, count=1)
        state[name] = source[old]
    target.load_state_dict(state, strict=True)
    return target
