"""Find the stack of transformer blocks in any model, and capture what goes into and out of its blocks.

This is the one place that knows how blocks are wired into a model, so every metric shares the same
index convention: block l has input x^l, the last block's output is x^L (before any final norm), and
"removing block l" (`removal.removed_blocks`) means x^l goes straight to block l+1.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from layerprobe.core import UnsupportedModel
from layerprobe.model.encdec import choose_side, is_encoder_decoder

if TYPE_CHECKING:
    import torch
    from torch import nn

# What a block is called with: the hidden states first (or as `hidden_states=`), then whatever its family
# passes (masks, caches, position embeddings, ...): truly arbitrary, so these stay `Any`.
BlockArgs = tuple[Any, ...]
BlockKwargs = dict[str, Any]
BlockCall = tuple[BlockArgs, BlockKwargs]
# Hooks that only read a call: a forward pre-hook registered with `with_kwargs=True`, and a forward hook.
PreHook = Callable[["nn.Module", BlockArgs, BlockKwargs], None]
ForwardHook = Callable[["nn.Module", BlockArgs, Any], None]

# Stack locations of common families, relative to the base model (the model without its head).
KNOWN_PATHS = (
    "layers",  # LLaMA, Qwen, Mistral, DeepSeek, Gemma, Phi, GPT-NeoX
    "h",  # GPT-2, GPT-J, Falcon, BLOOM
    "encoder.layer",  # BERT, RoBERTa, ELECTRA, DeBERTa
    "decoder.layers",  # OPT
    "blocks",  # MPT
    "language_model.layers",  # multimodal wrappers
    "model.layers",
    "transformer.h",  # models whose base_model is the whole model (remote code)
)


@dataclass(frozen=True)
class LayerStack:
    """The ModuleList of blocks inside `root`, found at `path` (dotted, relative to `root`)."""

    root: nn.Module
    path: str
    blocks: nn.ModuleList

    @property
    def num_layers(self) -> int:
        return len(self.blocks)

    @property
    def block_class(self) -> str:
        return type(self.blocks[0]).__name__

    def parameters_per_block(self) -> list[int]:
        return [sum(p.numel() for p in block.parameters()) for block in self.blocks]


def find_layers(model: nn.Module, path: str | None = None) -> LayerStack:
    """Locate the block stack: `path` if given, else known paths, else the largest repeated ModuleList.

    The stack is looked up in the base model (`model.base_model`: the model without its head), and its
    path is given relative to it, so `angular` (base model) and `prune-drop` (model with a head) report
    the same path and accept the same `--layers-path`; a path written from the head model
    (`model.layers`) is accepted too. The fallback picks, among ModuleLists whose children share one
    class, the one holding the most parameters: the block stack contains everything else that repeats
    (MoE expert lists included). An encoder-decoder has two stacks: `path` picks one, else the decoder
    (`encdec.choose_side`).
    """
    if is_encoder_decoder(model):
        root, side = choose_side(model, path)
        return _checked(LayerStack(root, side.path, side.blocks))
    base = base_of(model)
    _refuse_shared_weights(base)
    if path:
        relative = _relative_to_base(model, base, path)
        if base is not model and _module_list(base, relative) is None and _module_list(model, path) is not None:
            return _checked(
                LayerStack(model, path, _stack_at(model, path).blocks)
            )  # outside the base: a VLM's vision tower
        return _checked(_stack_at(base, relative))
    if is_dual_encoder(base):  # CLIP, SigLIP: the text tower's stack by default (model/towers.py)
        found_text = _largest_repeated_list(base.get_submodule("text_model"))
        if found_text is not None:
            return _checked(LayerStack(base, "text_model." + found_text[0], found_text[1]))
    for candidate in KNOWN_PATHS:
        found = _module_list(base, candidate)
        if found is not None:
            return _checked(LayerStack(base, candidate, found))
    best = _largest_repeated_list(base)
    if best is None:
        raise UnsupportedModel(
            f"Cannot find the transformer blocks of {type(model).__name__}: none of the known paths "
            f"({', '.join(dict.fromkeys(KNOWN_PATHS))}) exist and no ModuleList of repeated blocks was found.",
            hint="Pass --layers-path with the dotted path of the blocks' nn.ModuleList.",
        )
    return _checked(LayerStack(base, best[0], best[1]))


def base_of(model: nn.Module) -> nn.Module:
    """The model without its head: the module whose forward returns `last_hidden_state`.

    Usually `model.base_model`. Some heads name a `base_model_prefix` that is not one of their attributes
    (Llama-4 text: "language_model", while the decoder sits at `model`), so `base_model` is the whole model;
    then the child model that owns the input embeddings is the base. Both engines and both commands use
    this, so they agree on the stack and its path.
    """
    from torch import nn

    base: nn.Module = getattr(model, "base_model", model)
    if base is not model or not isinstance(model, nn.Module) or is_dual_encoder(model):
        return base
    embeddings = input_embeddings(model)
    for child in model.children():
        if hasattr(child, "base_model") and embeddings is not None and input_embeddings(child) is embeddings:
            return base_of(child)
    return model


def is_dual_encoder(model: nn.Module) -> bool:
    """A model with a text and a vision tower side by side (CLIP, SigLIP): its forward needs both inputs.

    Its base model is the whole model (not the tower that owns the input embeddings), so either tower's
    stack is reachable by its path.
    """
    return hasattr(model, "text_model") and hasattr(model, "vision_model") and not hasattr(model, "language_model")


def input_embeddings(model: nn.Module) -> nn.Module | None:
    """The model's input embeddings, or None where it has none it can name (CLIP: one per tower)."""
    get_input_embeddings = getattr(model, "get_input_embeddings", None)  # transformers' models have it
    if get_input_embeddings is None:
        return None
    try:
        return get_input_embeddings()
    except (AttributeError, NotImplementedError):
        return None


def _relative_to_base(model: nn.Module, base: nn.Module, path: str) -> str:
    """Accept a path written from the head model (`model.layers`) as well as from the base (`layers`)."""
    if _module_list(base, path) is not None:
        return path
    prefixes = {getattr(model, "base_model_prefix", ""), getattr(base, "base_model_prefix", "")}
    prefixes.update(name for name, child in getattr(model, "named_children", list)() if child is base)
    # A wrapper's language model sits deeper (`model.language_model`): its own path, also written from the head.
    inner = next((name for name, child in getattr(model, "named_modules", list)() if child is base and name), "")
    if inner:
        prefixes |= {inner} | {f"{p}.{inner}" for p in prefixes if p and not inner.startswith(p + ".")}
    for prefix in sorted((p for p in prefixes if p), key=len, reverse=True):
        if path.startswith(prefix + ".") and _module_list(base, path[len(prefix) + 1 :]) is not None:
            return path[len(prefix) + 1 :]
    for prefix in sorted(p for p in prefixes if p):
        if path.startswith(prefix + "."):
            return path[len(prefix) + 1 :]
    return path


def _refuse_shared_weights(base: nn.Module) -> None:
    """ALBERT applies one layer module L times: there is no list of L distinct blocks to capture or remove."""
    config = getattr(base, "config", None)
    groups = getattr(config, "num_hidden_groups", None)
    if isinstance(groups, int) and groups < (depth := getattr(config, "num_hidden_layers", groups)):
        raise UnsupportedModel(
            f"{type(base).__name__} shares weights across its depth: {groups} layer group(s) applied "
            f"{depth} times (ALBERT-style), so it has no stack of distinct blocks.",
            hint="layerprobe measures models whose blocks are separate modules, each applied once per forward "
            "pass; no --layers-path can change that for this model.",
        )


def _checked(stack: LayerStack) -> LayerStack:
    """Refuse a list that holds one module several times: removing or hooking "one block" would hit all."""
    if len({id(block) for block in stack.blocks}) != stack.num_layers:
        raise UnsupportedModel(
            f"The blocks at {stack.path!r} repeat one module object (shared weights), so one block cannot be "
            "captured or removed on its own.",
            hint="layerprobe measures models whose blocks are separate modules, each applied once per forward pass.",
        )
    return stack


def _stack_at(base: nn.Module, path: str) -> LayerStack:
    try:
        found = base.get_submodule(path)
    except AttributeError as exc:
        raise UnsupportedModel(
            f"--layers-path {path!r} does not exist in {type(base).__name__}.",
            hint="Run `layerprobe layers MODEL` to see the stack layerprobe finds.",
        ) from exc
    from torch import nn

    if not isinstance(found, nn.ModuleList) or len(found) == 0:
        raise UnsupportedModel(
            f"--layers-path {path!r} is a {type(found).__name__}, not a list of blocks.",
            hint="Point it at the nn.ModuleList that holds the transformer blocks.",
        )
    return LayerStack(base, path, found)


def _module_list(root: nn.Module, path: str) -> nn.ModuleList | None:
    from torch import nn

    try:
        found = root.get_submodule(path)
    except AttributeError:
        return None
    return found if isinstance(found, nn.ModuleList) and len(found) > 0 else None


def _largest_repeated_list(root: nn.Module) -> tuple[str, nn.ModuleList] | None:
    from torch import nn

    best: tuple[int, str, nn.ModuleList] | None = None
    for name, module in root.named_modules():
        if not isinstance(module, nn.ModuleList) or len(module) < 2:
            continue
        if len({type(child) for child in module}) != 1:
            continue
        size = sum(p.numel() for p in module.parameters())
        if size and (best is None or size > best[0]):
            best = (size, name, module)
    return None if best is None else (best[1], best[2])


def hidden_from_output(output: object) -> torch.Tensor:
    """The hidden states a block returns: blocks return a tensor, a tuple led by it, or a ModelOutput."""
    import torch

    if isinstance(output, torch.Tensor):
        return output
    if isinstance(output, (tuple, list)):
        first: torch.Tensor = output[0]
        return first
    if hasattr(output, "to_tuple"):  # a ModelOutput
        leading: torch.Tensor = output.to_tuple()[0]
        return leading
    raise UnsupportedModel(f"A block returned {type(output).__name__}; cannot find its hidden states.")


def hidden_from_input(args: BlockArgs, kwargs: BlockKwargs) -> torch.Tensor:
    """The hidden states a block receives, passed positionally or as `hidden_states=`."""
    if args:
        first: torch.Tensor = args[0]
        return first
    if "hidden_states" in kwargs:
        named: torch.Tensor = kwargs["hidden_states"]
        return named
    raise UnsupportedModel("A block was called without hidden states as its first argument.")


@contextlib.contextmanager
def capture_block_states(stack: LayerStack, absent: Collection[int] = ()) -> Iterator[list[torch.Tensor]]:
    """Record x^0 … x^L during the forward passes run inside the block.

    Yields a list that holds, after each forward pass, L+1 tensors of shape (batch, seq, hidden): the
    input of every block and the output of the last. The caller clears it between passes. Tensors are
    referenced, not copied: blocks build new tensors, so the recorded ones stay valid.

    Each forward pass of the stack's root must call every block exactly once; a block applied twice
    (shared weights) or skipped would shift every recorded index, so it raises `UnsupportedModel`.

    `absent` blocks are the exception: the model skips them on purpose (mllama's image-only blocks in a
    text-only pass, `streams.image_only_blocks`), so each must run 0 times, and after the pass the state
    flowing past it (x^(l+1)) stands at its place, so that index l still means block l.
    """
    states: list[torch.Tensor] = []
    skipped = sorted(set(absent))
    last = max(i for i in range(stack.num_layers) if i not in skipped)
    calls = [0] * stack.num_layers

    def begin(_module: nn.Module, _args: BlockArgs, _kwargs: BlockKwargs) -> None:
        calls[:] = [0] * len(calls)

    def before_block(index: int) -> PreHook:
        def before(_module: nn.Module, args: BlockArgs, kwargs: BlockKwargs) -> None:
            calls[index] += 1
            states.append(hidden_from_input(args, kwargs))

        return before

    def after(_module: nn.Module, _args: BlockArgs, output: object) -> None:
        states.append(hidden_from_output(output))

    def end(_module: nn.Module, _args: BlockArgs, _output: object) -> None:
        wrong = [(i, n) for i, n in enumerate(calls) if n != (0 if i in skipped else 1)]
        if not wrong:
            for index in skipped:  # ascending: each takes the state the model passed on past it
                states.insert(index, states[index])
        if wrong:
            index, count = wrong[0]
            raise UnsupportedModel(
                f"Block {index} of {stack.path!r} ran {count} times in one forward pass of "
                f"{type(stack.root).__name__}; layerprobe needs every block applied exactly once.",
                hint="Models that reuse one block (shared weights) or skip blocks cannot be measured block by block.",
            )

    handles = [
        block.register_forward_pre_hook(before_block(index), with_kwargs=True)
        for index, block in enumerate(stack.blocks)
        if index not in skipped
    ]
    handles.append(stack.blocks[last].register_forward_hook(after))
    handles.append(stack.root.register_forward_pre_hook(begin, with_kwargs=True))
    handles.append(stack.root.register_forward_hook(end))
    try:
        yield states
    finally:
        for handle in handles:
            handle.remove()
