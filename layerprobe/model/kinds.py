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
from layerprobe.model.facts import CAUSAL_LM, EXTRACTIVE_QA, IMAGE_CLASSIFIER, MASKED_LM, SEQ2SEQ

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

    def ships(self, config: PretrainedConfig) -> bool:
        """Whether the checkpoint was saved as this loader's class (its `architectures` say so): its head is trained."""
        from transformers.models.auto import modeling_auto

        known = getattr(modeling_auto, self.mapping, {}).get(getattr(config, "model_type", ""), ())
        names = {known} if isinstance(known, str) else set(known)
        return bool(names & set(getattr(config, "architectures", None) or []))

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
IMAGE_CLASSIFIER_LOADER = Loader(
    "AutoModelForImageClassification", "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES", "image classifier"
)
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
register_kind(HeadKind(IMAGE_CLASSIFIER, (IMAGE_CLASSIFIER_LOADER,)))


def shipped_head(config: PretrainedConfig) -> str | None:
    """The encoder head a checkpoint was saved with and `--task corpus` can score: masked LM or image classifier.

    Read from `architectures` (the class `save_pretrained` wrote), so a bare `BertModel` or a `ViTModel`
    has none even though its family has heads: loading one would add a random head.
    """
    for purpose in (MASKED_LM, IMAGE_CLASSIFIER):
        if any(loader.ships(config) for loader in head_kind(purpose).loaders):
            return purpose
    return None


# What `--task corpus` compares between the full and a pruned model (docs/methods.md, "Corpus metric by kind").
NEXT_TOKEN, MASKED_TOKEN, CLASS_LOGITS, POOLED_OUTPUT = "next-token", "masked-token", "class-logits", "pooled-output"
CORPUS_RULE = (
    "the head the checkpoint ships for the measured stack is scored: next-token (causal LM, encoder-decoder) or "
    "masked-token (masked LM) on a text stack, class logits (image classifier) on a vision stack; a stack "
    "with no such head is scored by its tower's pooled output"
)


@dataclass(frozen=True)
class CorpusEstimator:
    """Which corpus metric a model gets, the head it is loaded with for it, and why (one line for humans)."""

    name: str  # NEXT_TOKEN, MASKED_TOKEN, CLASS_LOGITS or POOLED_OUTPUT
    purpose: str  # what `load_model` loads: "head" (the LM head), MASKED_LM, IMAGE_CLASSIFIER or "base" (no head)
    reason: str
    reads_images: bool = False  # its items are images (a vision stack), not text windows

    @property
    def metrics(self) -> tuple[str, ...]:
        """The metrics this estimator reports, the driving one (prune-curve's default) first."""
        if self.name in (NEXT_TOKEN, MASKED_TOKEN):
            return ("nll", "perplexity", "kl", "top1_agreement")
        if self.name == CLASS_LOGITS:
            return ("kl", "top1_agreement")
        return ("cosine_distance",)


def corpus_estimator(config: PretrainedConfig, kind: str, role: str) -> CorpusEstimator | None:
    """The corpus metric of a model of `kind` whose measured stack reads `role` ("text" or "vision"): one rule.

    `CORPUS_RULE` says it in words. None for an extractive-QA model: its head answers questions about a
    context, which a corpus window is not (score it with --task squad).
    """
    architecture = (getattr(config, "architectures", None) or [getattr(config, "model_type", "the model")])[0]
    if role == "vision":
        if shipped_head(config) == IMAGE_CLASSIFIER:
            return CorpusEstimator(
                CLASS_LOGITS,
                IMAGE_CLASSIFIER,
                f"{architecture} ships an image-classification head: its class logits on each image",
                reads_images=True,
            )
        return CorpusEstimator(
            POOLED_OUTPUT, "base", f"the vision tower of {architecture} has no head of its own: its pooled output", True
        )
    if kind in (CAUSAL_LM, SEQ2SEQ):
        what = "a causal LM" if kind == CAUSAL_LM else "an encoder-decoder (its decoder teacher-forced)"
        return CorpusEstimator(NEXT_TOKEN, "head", f"{architecture} is {what}: its next-token predictions")
    if kind == EXTRACTIVE_QA:
        return None
    if shipped_head(config) == MASKED_LM:
        return CorpusEstimator(
            MASKED_TOKEN, MASKED_LM, f"{architecture} ships a masked-LM head: its predictions of masked tokens"
        )
    return CorpusEstimator(
        POOLED_OUTPUT, "base", f"{architecture} ships no head for its text stack: the text tower's pooled output"
    )
