"""What a model is, read from its config and its code, never from its name.

Its kind decides which head a command loads and which tasks fit it (a BERT fine-tuned for SQuAD is an
extractive-QA model whatever it is called); its context length caps the corpus windows; the keywords its
forward takes differ between families (use_cache, token_type_ids, ...), so callers ask before passing them.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING

from layerprobe.core import UnsupportedModel

if TYPE_CHECKING:
    from torch import nn
    from transformers import PretrainedConfig, PreTrainedTokenizerBase

CAUSAL_LM, ENCODER, EXTRACTIVE_QA = "causal-lm", "encoder", "extractive-qa"
MASKED_LM = "masked-lm"  # an encoder with its pretraining head (depth --grad)
SEQ2SEQ = "encoder-decoder"  # a text-to-text model: two stacks, one measured per run (model/encdec.py)
IMAGE_CLASSIFIER = "image-classification"  # a vision tower with its class head (ViTForImageClassification)
PURPOSES = ("base", "head", CAUSAL_LM, EXTRACTIVE_QA, MASKED_LM, IMAGE_CLASSIFIER)  # what `load_model` may load


def model_kind(config: PretrainedConfig) -> str:
    """Classify a config as causal-lm, encoder or extractive-qa.

    A head named in `architectures` decides (…ForQuestionAnswering, …ForCausalLM); otherwise (a bare
    `LlamaModel`, a classifier) the family decides: a masked-LM family is an encoder, a causal-LM
    family is a decoder. An encoder-decoder whose encoder reads text (T5, BART) is `encoder-decoder`; one
    whose encoder reads audio or images (Whisper) is refused: no text-only pass drives its stacks.
    """
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_MASKED_LM_MAPPING_NAMES,
        MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES,
    )

    if getattr(config, "is_encoder_decoder", False):
        model_type = getattr(config, "model_type", "")
        if model_type in MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES:
            return SEQ2SEQ
        reads = "audio features" if model_type in MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES else "inputs other than text"
        raise UnsupportedModel(
            f"{model_type} is an encoder-decoder whose encoder reads {reads}, not text, and whose decoder attends "
            "to that encoder's output in every block: no text-only pass is defined for either stack."
        )
    for arch in getattr(config, "architectures", None) or []:
        if arch.endswith("ForQuestionAnswering"):
            return EXTRACTIVE_QA
        if arch.endswith(("ForCausalLM", "LMHeadModel", "ForConditionalGeneration")):
            return CAUSAL_LM
    model_type = getattr(config, "model_type", "")
    if model_type in MODEL_FOR_MASKED_LM_MAPPING_NAMES and not getattr(config, "is_decoder", False):
        return ENCODER
    if model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        return CAUSAL_LM
    return ENCODER


# Families whose position ids start at pad_token_id + 1: the first pad_token_id + 1 embeddings are unusable.
_OFFSET_POSITIONS = {
    "roberta",
    "xlm-roberta",
    "xlm-roberta-xl",
    "camembert",
    "roberta-prelayernorm",
    "data2vec-text",
    "longformer",
    "ibert",
    "xmod",
    "bart",
    "mbart",
}


def context_length(config: PretrainedConfig | None, tokenizer: PreTrainedTokenizerBase | None = None) -> int | None:
    """The longest sequence the model's position scheme (and its tokenizer, if it says) supports."""
    limits = []
    for name in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            if getattr(config, "model_type", "") in _OFFSET_POSITIONS:
                value -= (getattr(config, "pad_token_id", None) or 0) + 1
            limits.append(value)
            break
    declared = getattr(tokenizer, "model_max_length", None)
    if isinstance(declared, int) and 0 < declared < 1_000_000:  # transformers' "no limit" is ~1e30
        limits.append(declared)
    return min(limits) if limits else None


def takes_argument(module: nn.Module, name: str) -> bool:
    """Whether `module.forward` names `name` (models differ on use_cache, token_type_ids, ...)."""
    return name in inspect.signature(module.forward).parameters
