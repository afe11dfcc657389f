"""Which transformers class loads a checkpoint with its head: one table, read by what the checkpoint is.

A head is reached through the auto class whose mapping knows the checkpoint's `model_type`, never through
its name: a LLaVA or Qwen2.5-VL answers text as a causal LM does, but only `AutoModelForImageTextToText`
knows it, while a Gemma-3 is known to both. Each `HeadKind` lists, in order of preference, the auto
classes that load a checkpoint for one purpose (score text as a causal LM, answer extractive QA, fill
masks…); the first whose mapping holds the config's model type wins. New kinds (encoder-decoders,
vision towers, dual encoders) are added with `register_kind`, so loading stays one rule in one place.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from layerprobe.core import UnsupportedModel
from layerprobe.model.facts import CAUSAL_LM, EXTRACTIVE_QA, MASKED_LM, SEQ2SEQ

if TYPE_CHECKING:
    from transformers import PretrainedConfig

# An auto class found at run time by name (AutoModelForCausalLM, AutoModelForImageTextToText, ...).
AutoClass = Any


@dataclass(frozen=True)
class Loader:
    """One auto class and the transformers mapping (in `modeling_auto`) that says which model types it loads."""

    auto_class: str  # e.g. "AutoModelForImageTextToText"
    mapping: str  # e.g. "MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES"
    label: str  # what the checkpoint is when this loader takes it: "causal LM", "image-text-to-text", ...

    def knows(self, model_type: str) -> bool:
        """Whether this auto class can build a checkpoint of `model_type`."""
        from transformers.models.auto import modeling_auto

        return model_type in getattr(modeling_auto, self.mapping, {})

    def load_class(self) -> AutoClass:
        """The auto class itself."""
        import transformers as tf

        return getattr(tf, self.auto_class)


@dataclass(frozen=True)
class HeadKind:
    """A purpose a checkpoint is loaded for, and the loaders that serve it, tried in order."""

    name: str  # the purpose: "causal-lm", "extractive-qa", "masked-lm", ...
    loaders: tuple[Loader, ...]


CAUSAL_LM_LOADER = Loader("AutoModelForCausalLM", "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES", "causal LM")
# A vision-language model scored on text: its language model with the LM head, vision tower idle.
IMAGE_TEXT_LOADER = Loader(
    "AutoModelForImageTextToText", "MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES", "image-text-to-text"
)
QA_LOADER = Loader("AutoModelForQuestionAnswering", "MODEL_FOR_QUESTION_ANSWERING_MAPPING_NAMES", "extractive QA")
MASKED_LM_LOADER = Loader("AutoModelForMaskedLM", "MODEL_FOR_MASKED_LM_MAPPING_NAMES", "masked LM")
# An encoder-decoder (T5, BART) run teacher-forced: both stacks and the LM head (model/encdec.py).
SEQ2SEQ_LOADER = Loader("AutoModelForSeq2SeqLM", "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES", "encoder-decoder")

_KINDS: dict[str, HeadKind] = {}


def register_kind(kind: HeadKind) -> None:
    """Add (or replace) the loaders of one purpose; later rooms and helpers extend the table this way."""
    _KINDS[kind.name] = kind


def head_kind(name: str) -> HeadKind:
    """The registered kind `name` (ValueError for a name no module registered: a programming error)."""
    if name not in _KINDS:
        raise ValueError(f"no head kind {name!r}; registered: {sorted(_KINDS)}")
    return _KINDS[name]


def loader_for(config: PretrainedConfig, purpose: str, trust_remote_code: bool = False) -> Loader:
    """The first loader of `purpose` that knows the config's model type.

    Remote code registers its classes in the config's `auto_map` instead of transformers' mappings: the
    first loader it names wins. A checkpoint no loader knows is refused in one line naming what would.
    """
    kind = head_kind(purpose)
    model_type = getattr(config, "model_type", "")
    auto_map = getattr(config, "auto_map", None) or {}
    for loader in kind.loaders:
        if loader.knows(model_type) or (trust_remote_code and loader.auto_class in auto_map):
            return loader
    if trust_remote_code:  # remote code may register its class when loaded: let transformers say
        return kind.loaders[0]
    known = ", ".join(loader.auto_class for loader in kind.loaders)
    raise UnsupportedModel(
        f"{model_type or type(config).__name__} has no {purpose} head that transformers can load ({known} do not "
        "know it).",
        hint="Measure it without a head: `layerprobe angular` and `layerprobe depth` load the base model.",
    )


def head_class(config: PretrainedConfig, purpose: str, trust_remote_code: bool = False) -> AutoClass:
    """The auto class that loads `config`'s checkpoint for `purpose` (see `loader_for`)."""
    return loader_for(config, purpose, trust_remote_code).load_class()


register_kind(HeadKind(CAUSAL_LM, (CAUSAL_LM_LOADER, IMAGE_TEXT_LOADER)))
register_kind(HeadKind(EXTRACTIVE_QA, (QA_LOADER,)))
register_kind(HeadKind(MASKED_LM, (MASKED_LM_LOADER,)))
register_kind(HeadKind(SEQ2SEQ, (SEQ2SEQ_LOADER,)))
