"""A model the caller already holds (a notebook, a training loop), measured in place and left as it was found.

The commands load a checkpoint themselves (`load.py`); the Python API and the training monitor are handed a
live `PreTrainedModel` instead. `live_model` describes it as a `LoadedModel` without reading or copying a
weight, and `untouched` runs the measurement with the model in eval mode, its gradients set aside and the
random number generators forked, then puts back every module's `training` flag, every `.grad` and every
`requires_grad` flag: the caller's model (and its next training step) cannot tell it was measured.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from layerprobe.core import LayerprobeError, ModelSpec
from layerprobe.model.devices import module_device
from layerprobe.model.facts import CAUSAL_LM, MASKED_LM, context_length, model_kind
from layerprobe.model.load import LoadedModel
from layerprobe.model.stack import base_of

if TYPE_CHECKING:
    from torch import nn
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

LIVE_NAME = "in-memory model"  # how results name a live model whose config names no checkpoint


def is_live_model(model: object) -> bool:
    """Whether `model` is a torch module (a live model) rather than a hub id or a path."""
    try:
        from torch import nn
    except ImportError:  # pragma: no cover - torch is a dependency
        return False
    return isinstance(model, nn.Module)


def live_name(model: nn.Module) -> str:
    """The name results record for a live model: the checkpoint its config came from, if it says."""
    config = getattr(model, "config", None)
    return str(getattr(config, "_name_or_path", "") or "") or LIVE_NAME


def live_model(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, spec: ModelSpec, head: bool = False
) -> LoadedModel:
    """`model` described as `load_model` would describe the checkpoint it came from; nothing is loaded or copied.

    `head=False` hands the measurement the base model (angular needs no logits); `head=True` the model with
    its LM head (`depth --grad`), refused with one line when `model` has none. The device, dtype and
    attention implementation recorded are the model's own.
    """
    config = getattr(model, "config", None)
    if config is None:
        raise LayerprobeError(
            f"layerprobe measures Hugging Face models; a {type(model).__name__} has no config.",
            hint="Pass a transformers PreTrainedModel (or a hub id / checkpoint directory).",
        )
    if tokenizer is None:
        raise LayerprobeError(
            "A live model needs its tokenizer.", hint="Pass tokenizer=AutoTokenizer.from_pretrained(<checkpoint>)."
        )
    kind = model_kind(config)
    base = base_of(model)
    if head:
        if base is model or kind not in (CAUSAL_LM, MASKED_LM):
            raise LayerprobeError(
                f"The {type(model).__name__} has no language-modelling head, so gradient norms of its own loss "
                "are undefined.",
                hint="Pass the …ForCausalLM / …ForMaskedLM model, or measure without grad.",
            )
        chosen: Any = model
    else:
        chosen = base
    embeddings = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    dtype = next((p.dtype for p in model.parameters() if p.is_floating_point()), None)
    return LoadedModel(
        model=chosen,
        tokenizer=tokenizer,
        kind=kind,
        spec=spec,
        architecture=(getattr(config, "architectures", None) or [type(model).__name__])[0],
        model_type=getattr(config, "model_type", "unknown"),
        commit=getattr(config, "_commit_hash", None),
        dtype=str(dtype).replace("torch.", "") if dtype is not None else "unknown",
        input_device=module_device(embeddings) if embeddings is not None else None,
        context_length=context_length(config, tokenizer),
        attn_implementation=getattr(config, "_attn_implementation", None),
    )


@contextlib.contextmanager
def untouched(model: nn.Module) -> Iterator[None]:
    """Measure `model` in eval mode and give it back exactly as it was (module docstring).

    Inside: every module in eval mode (no dropout), every `.grad` set aside (a gradient pass starts from
    zero and the caller's gradients survive it), the CPU and current-CUDA random states forked (the
    caller's next dropout mask is the one it would have drawn).
    """
    import torch

    modes = [(m, m.training) for m in model.modules()]
    params = list(model.parameters())
    grads = [(p, p.grad, p.requires_grad) for p in params]
    devices = [torch.cuda.current_device()] if torch.cuda.is_available() and torch.cuda.is_initialized() else []
    try:
        for p in params:
            p.grad = None
        model.eval()
        with torch.random.fork_rng(devices=devices):
            yield
    finally:
        for module, training in modes:
            module.training = training
        for p, grad, requires_grad in grads:
            p.grad = grad
            p.requires_grad_(requires_grad)
