"""Encoder-decoders (T5, BART, …): two stacks of blocks, each measured on its own, on one text pass.

A text-to-text model has an encoder stack and a decoder stack. layerprobe measures one of them per run;
which one is `--layers-path` (written from the base model, `encoder.block`, or from the model with its
head, `model.encoder.layers`), and without it the decoder: the stack that writes the text the model
generates (docs/methods.md, "Encoder-decoders").

Both stacks see the same window: the encoder reads it as it is, and the decoder reads it teacher-forced,
shifted right by one with the model's `decoder_start_token_id` in front (the shift transformers itself
applies to labels), so decoder position t predicts token t of the window. `TeacherForced` runs that pass
and is what a loaded encoder-decoder is: its `encoder` and `decoder` are the model's own modules, so the
block paths read the same as in the base model, and taking a block out of it takes it out of the model.
Its head (`Seq2SeqHead`) applies the family's output scaling and logit bias to the decoder's final hidden
states, as the model's own forward does.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from layerprobe.core import UnsupportedModel

if TYPE_CHECKING:
    import torch
    from torch import nn
    from transformers import PretrainedConfig

ENCODER_SIDE, DECODER_SIDE = "encoder", "decoder"
SIDES = (ENCODER_SIDE, DECODER_SIDE)
_LIST_NAMES = ("block", "layers", "layer")  # where encoder/decoder modules keep their blocks (T5, BART, …)
# The config field that counts each side's blocks, in the order families name it (BART: encoder_layers;
# T5: num_layers for the encoder, num_decoder_layers for the decoder).
COUNT_FIELDS = {ENCODER_SIDE: ("encoder_layers", "num_layers"), DECODER_SIDE: ("decoder_layers", "num_decoder_layers")}


@dataclass(frozen=True)
class SideStack:
    """One stack of an encoder-decoder: which side, its path from the base model, and its blocks."""

    side: str
    path: str
    blocks: nn.ModuleList


def is_encoder_decoder(model: object) -> bool:
    """Whether `model` (a transformers model or a `TeacherForced`) has an encoder and a decoder stack."""
    return bool(getattr(getattr(model, "config", None), "is_encoder_decoder", False)) and hasattr(
        model, "get_submodule"
    )


def seq2seq_base(model: nn.Module) -> Any:
    """The module whose `encoder` and `decoder` the stack paths start from (the model without its head)."""
    if getattr(model, "runs_teacher_forced", False):
        return model
    prefix = getattr(model, "base_model_prefix", "")
    inner = getattr(model, prefix, None) if prefix else None
    return inner if hasattr(inner, "get_submodule") and hasattr(inner, "encoder") else model


def side_stacks(model: nn.Module) -> list[SideStack]:
    """The encoder's and the decoder's block lists, with their paths from the base model."""
    from torch import nn

    base = seq2seq_base(model)
    found = []
    for side in SIDES:
        module = getattr(base, side, None)
        for name in _LIST_NAMES:
            blocks = getattr(module, name, None)
            if isinstance(blocks, nn.ModuleList) and len(blocks) > 0:
                found.append(SideStack(side, f"{side}.{name}", blocks))
                break
    return found


def choose_side(model: nn.Module, path: str | None) -> tuple[nn.Module, SideStack]:
    """The stack `path` names (from the base model or from the model with its head); the decoder without it.

    Returns (root, stack): the root is the module the path is relative to.
    """
    base = seq2seq_base(model)
    stacks = side_stacks(model)
    if len(stacks) != len(SIDES):
        raise UnsupportedModel(f"Cannot find the encoder's and the decoder's blocks of {type(model).__name__}.")
    if not path:
        return base, stacks[1]
    heads: list[nn.Module] = [getattr(model, "seq2seq", model), base]
    prefixes = {getattr(module, "base_model_prefix", "") for module in heads} - {""}
    written = [path] + [path[len(p) + 1 :] for p in prefixes if path.startswith(p + ".")]  # from the head model
    for stack in stacks:
        for root in heads:
            if any(_submodule(root, candidate) is stack.blocks for candidate in written):
                return base, stack
    listing = " or ".join(f"--layers-path {s.path} ({s.side})" for s in stacks)
    raise UnsupportedModel(
        f"--layers-path {path!r} is not a stack of {type(model).__name__}, an encoder-decoder: {listing}.",
        hint=f"Pass --layers-path {stacks[0].path} for the encoder or --layers-path {stacks[1].path} for the decoder.",
    )


def _submodule(root: nn.Module, path: str) -> nn.Module | None:
    try:
        return root.get_submodule(path)
    except AttributeError:
        return None


def side_of(model: nn.Module, path: str) -> str | None:
    """Which side of an encoder-decoder the stack at `path` is (None for a model with one stack)."""
    if not is_encoder_decoder(model):
        return None
    return next((s.side for s in side_stacks(model) if s.path == path), None)


def other_stacks(model: nn.Module, path: str) -> str | None:
    """How to measure the other stack of an encoder-decoder ("the encoder: --layers-path encoder.block")."""
    if not is_encoder_decoder(model):
        return None
    others = [f"the {s.side}: --layers-path {s.path}" for s in side_stacks(model) if s.path != path]
    return "; ".join(others) or None


def count_field(config: PretrainedConfig, side: str, num_layers: int) -> str:
    """The config field that counts `side`'s blocks (`encoder_layers`, `num_decoder_layers`, …)."""
    for name in COUNT_FIELDS[side]:
        if getattr(config, name, None) == num_layers:
            return name
    raise UnsupportedModel(
        f"The {config.model_type} config has no field that counts its {num_layers} {side} blocks "
        f"(looked for {', '.join(COUNT_FIELDS[side])}).",
        hint="Export needs a config that counts the blocks it removes.",
    )


def shift_right(input_ids: torch.Tensor, start: int) -> torch.Tensor:
    """The decoder's teacher-forced input: `start`, then the window without its last token. (batch, T)."""
    shifted = input_ids.new_empty(input_ids.shape)
    shifted[:, 0] = start
    shifted[:, 1:] = input_ids[:, :-1]
    return shifted


def decoder_start(config: PretrainedConfig) -> int:
    """The token the decoder starts from (`decoder_start_token_id`, else the pad token, as T5 does)."""
    for name in ("decoder_start_token_id", "pad_token_id"):
        value = getattr(config, name, None)
        if isinstance(value, int):
            return value
    raise UnsupportedModel(
        f"The {config.model_type} config names no decoder_start_token_id, so the decoder's input is undefined.",
        hint='Set "decoder_start_token_id" in its config.json.',
    )


def teacher_forced(seq2seq: Any) -> nn.Module:
    """The teacher-forced pass of a transformers encoder-decoder LM (see `TeacherForced` in `_pass_classes`)."""
    return cast("nn.Module", _pass_classes()[1](seq2seq))


@functools.cache
def _pass_classes() -> tuple[type, type]:
    """`Seq2SeqHead` and `TeacherForced`, defined on first use: torch is imported only when a model runs."""
    from torch import nn

    class Seq2SeqHead(nn.Module):
        """The LM head on the decoder's final hidden states: scaled as the family does, then the logit bias added."""

        def __init__(self, seq2seq: Any) -> None:  # a transformers …ForConditionalGeneration
            super().__init__()
            self.lm_head: nn.Module = seq2seq.get_output_embeddings()
            config = seq2seq.config
            scales = bool(getattr(config, "scale_decoder_outputs", False))  # T5 with tied embeddings
            self.scale = float(config.d_model) ** -0.5 if scales else None
            self.bias = getattr(seq2seq, "final_logits_bias", None)  # BART, Marian, Pegasus: a (1, vocab) buffer

        @property
        def weight(self) -> torch.Tensor:
            """The output embedding: its rows are the vocabulary."""
            return cast("torch.Tensor", self.lm_head.weight)

        def forward(self, hidden: torch.Tensor) -> torch.Tensor:
            """Logits (..., vocab) for decoder final hidden states (..., hidden)."""
            if self.scale is not None:
                hidden = hidden * self.scale
            logits: torch.Tensor = self.lm_head(hidden)
            return logits if self.bias is None else logits + self.bias.to(logits.device)

    class TeacherForced(nn.Module):
        """An encoder-decoder LM run on one window: the encoder reads it, the decoder reads it shifted right.

        Its `encoder` and `decoder` are the model's own modules, so paths (`encoder.block`) and block removal
        act on the model itself. `forward` returns the decoder's final hidden states (`last_hidden_state`,
        decoder position t predicting window token t); `get_output_embeddings` is the head that turns them
        into the model's logits.
        """

        seq2seq: Any  # the transformers …ForConditionalGeneration it runs
        encoder: nn.Module
        decoder: nn.Module

        def __init__(self, seq2seq: Any) -> None:
            super().__init__()
            object.__setattr__(self, "seq2seq", seq2seq)  # not a child: its encoder and decoder are
            base = seq2seq_base(seq2seq)
            self.encoder, self.decoder = base.encoder, base.decoder
            self.head = Seq2SeqHead(seq2seq)
            self.config = seq2seq.config
            self.base_model_prefix = getattr(seq2seq, "base_model_prefix", "")
            self.start = decoder_start(seq2seq.config)
            self.runs_teacher_forced = True  # what `seq2seq_base` and `choose_side` recognise it by

        @property
        def base_model(self) -> TeacherForced:
            """The pass itself (what `base_model(...).last_hidden_state` is asked of a model with a head)."""
            return self

        def get_output_embeddings(self) -> Seq2SeqHead:
            """The head on the decoder's final hidden states."""
            return self.head

        def forward(self, input_ids: torch.Tensor, use_cache: bool = False, **_ignored: Any) -> Any:
            """Encoder on `input_ids` (batch, T), decoder teacher-forced on them; the decoder's final states."""
            from transformers.modeling_outputs import BaseModelOutput

            encoded = self.encoder(input_ids=input_ids).last_hidden_state
            decoded = self.decoder(
                input_ids=shift_right(input_ids, self.start), encoder_hidden_states=encoded, use_cache=False
            )
            return BaseModelOutput(last_hidden_state=decoded.last_hidden_state)

        def logits(self, input_ids: torch.Tensor) -> torch.Tensor:
            """The model's own logits for the same pass (its forward with decoder inputs): checks the head."""
            decoder_ids = shift_right(input_ids, self.start)
            output = self.seq2seq(input_ids=input_ids, decoder_input_ids=decoder_ids, use_cache=False)
            logits: torch.Tensor = output.logits
            return logits

    return Seq2SeqHead, TeacherForced


@contextlib.contextmanager
def first_block_handover(original: Sequence[nn.Module], kept: Sequence[nn.Module]) -> Iterator[None]:
    """T5's first block owns the relative position bias every block uses: hand it to the new first block.

    A T5 stack computes its position bias in block 0 (`has_relative_attention_bias`) and passes it on; a
    stack without block 0 would run with no position bias at all, and a checkpoint saved without it would
    load a randomly initialised bias. Removing block 0 therefore moves its bias embedding to the attention
    of the first kept block (the same module: nothing copied), exactly what a T5 saved with the kept blocks
    holds. Put back on exit. Nothing happens for other designs or when block 0 stays.
    """
    if not kept or kept[0] is original[0]:
        yield
        return
    moved: list[nn.Module] = []
    new_first = dict(kept[0].named_modules())
    try:
        for name, module in original[0].named_modules():
            target = new_first.get(name)
            if getattr(module, "has_relative_attention_bias", False) and target is not None:
                if not getattr(target, "has_relative_attention_bias", True):
                    target.relative_attention_bias = module.relative_attention_bias
                    setattr(target, "has_relative_attention_bias", True)  # noqa: B010 - nn.Module's typing
                    moved.append(target)
        yield
    finally:
        for target in moved:
            setattr(target, "has_relative_attention_bias", False)  # noqa: B010
            del target.relative_attention_bias
