"""`lp.angular` and `lp.depth`: the `angular` and `depth` commands on a live model (or a hub id / path).

A live model is described without loading or copying a weight (`model.live_model`) and measured inside
`model.untouched`, which gives it back bit-identical: parameters, buffers, every module's `training` flag,
hooks, `requires_grad`, `.grad`, device and dtype. A hub id or path goes exactly the command's way. Either
way the result is the typed object the command writes (`AngularResult`, `DepthResult`), with the notebook
face of results/notebook.py. A live model's weights may differ from every file, so its result carries no
weights fingerprint.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any, TypeVar

import layerprobe.plots  # noqa: F401 - registers the figures behind a result's plot() and save()
from layerprobe.api.arguments import corpus_spec, model_spec
from layerprobe.core import DEFAULT_CHUNK_BYTES, AngularSpec, CorpusSpec, DepthSpec, ModelSpec, parse_memory_size
from layerprobe.measure import run_angular, run_depth
from layerprobe.model import LoadedModel, Progress, is_live_model, live_model, untouched
from layerprobe.results import AngularResult, DepthResult, PruneDropResult

R = TypeVar("R", AngularResult, DepthResult, PruneDropResult)


def without_fingerprint(result: R) -> R:
    """A live model's result: its weights may differ from any file, so no file's fingerprint is recorded."""
    return replace(result, model=replace(result.model, weights_fingerprint=None))


def measured(model: Any, tokenizer: Any, spec: ModelSpec, head: bool, run: Callable[[LoadedModel | None], R]) -> R:
    """`run` on what the call was given: a hub id / path the command's way, a live model in place.

    `run(None)` loads a hub id or path as the command does. A live model is measured as it is and left as it
    was found; its result carries no weights fingerprint. One home, so every call treats the two alike.
    """
    if not is_live_model(model):
        return run(None)
    with untouched(model):
        result = run(live_model(model, tokenizer, spec, head=head))
    return without_fingerprint(result)


def angular(
    model: Any,
    tokenizer: Any = None,
    corpus: Any = CorpusSpec.dataset,
    *,
    tokens: int = CorpusSpec.tokens,
    positions: str = AngularSpec.positions,
    dataset_config: str | None = None,
    split: str = CorpusSpec.split,
    text_field: str = CorpusSpec.text_field,
    seq_len: int = CorpusSpec.seq_len,
    chat_template: bool = CorpusSpec.chat_template,
    batch_size: int = AngularSpec.batch_size,
    max_state_memory: str | None = None,
    progress: Progress | None = None,
    **loading_options: Any,
) -> AngularResult:
    """The angular distance between the inputs of every pair of blocks, as `layerprobe angular` measures it.

    `model`: a live transformers model (with `tokenizer`), or a hub id / checkpoint directory (loaded with
    the loading keywords: revision, dtype, device, device_map, trust_remote_code, layers_path, model_args,
    load_in_4bit, load_in_8bit, attn_implementation). `corpus`: a dataset id, a .txt/.jsonl/.parquet
    file, `builtin:pydoc`, or a list of strings. The other keywords are the command's options.

    Example:
        >>> result = lp.angular(model, tokenizer, "builtin:pydoc", tokens=4096)
        >>> result.to_frame()
    """
    spec = AngularSpec(
        model=model_spec(model, tokenizer, loading_options),
        corpus=corpus_spec(
            corpus,
            dataset_config=dataset_config,
            split=split,
            text_field=text_field,
            tokens=tokens,
            seq_len=seq_len,
            chat_template=chat_template,
        ),
        positions=positions,
        batch_size=batch_size,
        max_state_bytes=parse_memory_size(max_state_memory) or DEFAULT_CHUNK_BYTES,
    )
    return measured(model, tokenizer, spec.model, False, lambda loaded: run_angular(spec, progress, loaded=loaded))


def depth(
    model: Any,
    tokenizer: Any = None,
    corpus: Any = CorpusSpec.dataset,
    *,
    grad: bool = DepthSpec.grad,
    mask_seed: int = DepthSpec.mask_seed,
    tokens: int = CorpusSpec.tokens,
    positions: str = DepthSpec.positions,
    dataset_config: str | None = None,
    split: str = CorpusSpec.split,
    text_field: str = CorpusSpec.text_field,
    seq_len: int = CorpusSpec.seq_len,
    chat_template: bool = CorpusSpec.chat_template,
    batch_size: int = DepthSpec.batch_size,
    progress: Progress | None = None,
    **loading_options: Any,
) -> DepthResult:
    """Why blocks are lazy (placement, residual growth, updates, with `grad` gradient norms), as `layerprobe depth`.

    Arguments as `angular`'s; `grad=True` adds one forward+backward pass for each block's gradient norm of
    the model's own loss (a live model must then be the …ForCausalLM / …ForMaskedLM model). The gradients
    the model held before are given back untouched.

    Example:
        >>> result = lp.depth(model, tokenizer, "builtin:pydoc", tokens=4096, grad=True)
        >>> result.plot()
    """
    spec = DepthSpec(
        model=model_spec(model, tokenizer, loading_options),
        corpus=corpus_spec(
            corpus,
            dataset_config=dataset_config,
            split=split,
            text_field=text_field,
            tokens=tokens,
            seq_len=seq_len,
            chat_template=chat_template,
        ),
        positions=positions,
        batch_size=batch_size,
        grad=grad,
        mask_seed=mask_seed,
    )
    return measured(model, tokenizer, spec.model, grad, lambda loaded: run_depth(spec, progress, loaded=loaded))
