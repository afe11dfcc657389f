"""`layerprobe depth`: why blocks are lazy — norm placement, residual growth, sublayer updates, gradient norms.

One run: load the model, trace every block once for its norm placement and its attention/MLP sublayers
(`model.detect_placement`), stream the corpus through the model once recording x^0 … x^L and each
sublayer's contribution (`spread.py`), and with `--grad` one more forward+backward pass for the
gradient norms (`gradients.py`). Same model and corpus options as `angular`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol

from layerprobe.core import DepthSpec, UnsupportedModel
from layerprobe.data import ImageWindow, Window, batches, images_before_loading, pack_corpus, windows_before_loading
from layerprobe.measure.gradients import grad_norms
from layerprobe.measure.inputs import check_state_shapes, image_record, measured_tokens, model_inputs, note_stack
from layerprobe.measure.spread import DepthAccumulator, relative_size
from layerprobe.model import (
    CAUSAL_LM,
    ENCODER,
    MASKED_LM,
    BlockSublayers,
    LayerStack,
    LoadedModel,
    Progress,
    capture_block_states,
    check_loadable,
    detect_placement,
    find_layers,
    hidden_from_input,
    hidden_from_output,
    image_only_blocks,
    load_config,
    load_model,
    model_info,
    model_kind,
    residual_view,
    run_tower,
    skeleton_stack,
    tower_of,
)
from layerprobe.results import SUBLAYER_KINDS, DepthResult, RunTimer, read_pruned_from

if TYPE_CHECKING:
    import torch
    from torch import nn
    from torch.utils.hooks import RemovableHandle

TRACE_WINDOWS, TRACE_TOKENS = 2, 64  # tracing needs a few real positions, not the corpus
SublayerKey = tuple[int, str]  # (block, sublayer kind)


class ResidualRef(Protocol):
    """Where the trace found a sublayer's residual r (`Sublayer.residual`): block input, module input or output."""

    @property
    def kind(self) -> str: ...  # "block input", "input" or "output"

    @property
    def module(self) -> str | None: ...  # the module's path in the block (None for the block input)

    @property
    def key(self) -> int | str | None: ...  # which argument of a module input: its position, or its name


def run_depth(
    spec: DepthSpec,
    progress: Progress | None = None,
    loaded: LoadedModel | None = None,
    windows: Sequence[Window | ImageWindow] | None = None,
) -> DepthResult:
    """Load the model (unless given), trace placement, measure, and return the result.

    `windows` (with `loaded` only): the calibration windows already packed for it, e.g. a monitor's fixed set.
    """
    progress = progress or Progress()
    timer = RunTimer()
    purpose = _grad_purpose(spec) if spec.grad and loaded is None else "base"
    if loaded is None:  # everything cheap (config, tokenizer, the whole corpus) before any weight is read
        # e.g. bitsandbytes missing for --load-in-4bit: before streaming a corpus
        check_loadable(spec.model, progress.note)
        skeleton_stack(spec.model)
        progress.stage("Reading corpus", spec.corpus.tokens, "tok")
        images = images_before_loading(spec.model, spec.corpus)
        if images is None:
            tokenizer, windows, seq_len = windows_before_loading(spec.model, spec.corpus, progress.on_advance)
        elif spec.grad:
            raise UnsupportedModel(
                "--grad needs a language-modelling loss; a vision tower has none.",
                hint="Run depth without --grad on a vision tower.",
            )
        else:
            tokenizer, pictures = images
            windows, seq_len = pictures, pictures[0].patches
        progress.stage("Loading model")
        try:
            loaded = load_model(spec.model, purpose=purpose, tokenizer=tokenizer)
        except UnsupportedModel as exc:
            if purpose != MASKED_LM or "head" not in exc.message:
                raise
            raise UnsupportedModel(
                f"{spec.model.model} ships no trained masked-LM head, so its own loss (and --grad) is undefined.",
                hint="Run depth without --grad, or use a checkpoint saved with its …ForMaskedLM head.",
            ) from None
    else:
        seq_len = min(spec.corpus.seq_len, loaded.context_length or spec.corpus.seq_len)
    stack = find_layers(loaded.model, spec.model.layers_path)
    note_stack(stack, progress)
    if windows is None:
        progress.stage("Reading corpus", spec.corpus.tokens, "tok")
        windows = pack_corpus(loaded.tokenizer, spec.corpus, seq_len, progress.on_advance)
    progress.stage("Tracing norm placement", None, "")
    placement, sublayers = detect_placement(stack.root, stack, _trace_inputs(windows, loaded.input_device))
    # An exported checkpoint says which source blocks it kept: `compare` pairs blocks by it.
    placement = replace(placement, pruned_from=read_pruned_from(spec.model.model, stack.num_layers))
    progress.stage("Measuring", spec.corpus.tokens, "tok")
    accumulator = measure_depth(loaded, stack, windows, spec.positions, spec.batch_size, sublayers, progress.on_advance)
    grad = None
    if spec.grad:
        progress.stage("Gradient pass", spec.corpus.tokens, "tok")
        groups = [None if s is None else {sub.kind: sub.parameters for sub in s} for s in sublayers]
        texts = [w for w in windows if isinstance(w, Window)]  # --grad is refused for images before loading
        grad = grad_norms(loaded, stack, texts, spec.batch_size, groups, spec.mask_seed, progress.on_advance)
    found = [s for s in sublayers if s is not None]
    subs = None
    if found:
        subs = {
            kind: {
                "modules": [None if s is None else getattr(s, kind).module for s in sublayers],
                "relative": accumulator.sublayers[kind].result(),
            }
            for kind in SUBLAYER_KINDS
        }
    per_window = [int(accumulator.rms.count[0]) // max(1, len(windows))]  # positions of each window (images)
    tokens = measured_tokens(windows, [accumulator.rms.count[0] // max(1, len(windows))] * len(windows), spec.positions)
    data = {
        **spec.corpus.record(tokens=tokens, seq_len=seq_len),
        "windows": len(windows),
        "positions": spec.positions,
        "positions_averaged": accumulator.rms.count[0],
        "batch_size": spec.batch_size,
        **image_record(windows, per_window, spec.positions),
    }
    return DepthResult(
        model=model_info(loaded, stack),
        data=data,
        placement=placement,
        rms=accumulator.rms.result(),
        variance=accumulator.variance.result(),
        update=accumulator.update.result(),
        sublayers=subs,
        grad=grad,
        nonfinite_tokens=accumulator.nonfinite_tokens,
        run=timer.finish(loaded.device_label),
    )


def _grad_purpose(spec: DepthSpec) -> str:
    """Which head --grad needs, decided from the config before any weight is read."""
    kind = model_kind(load_config(spec.model))
    if kind == CAUSAL_LM:
        return CAUSAL_LM
    if kind == ENCODER:
        return MASKED_LM
    raise UnsupportedModel(
        f"{spec.model.model} is an {kind} model: --grad needs a language-modelling loss (next-token or masked-LM).",
        hint="Run depth without --grad.",
    )


def _trace_inputs(
    windows: Sequence[Window | ImageWindow], device: torch.device | None
) -> torch.Tensor | dict[str, torch.Tensor]:
    """A few real windows of equal length, cut to TRACE_TOKENS (images: TRACE_WINDOWS whole), for tracing."""
    import torch

    if isinstance(windows[0], ImageWindow):
        return model_inputs(windows[:TRACE_WINDOWS], device)
    texts = [w for w in windows if isinstance(w, Window)]
    length = min(TRACE_TOKENS, len(texts[0].input_ids))
    rows = [w.input_ids[:length] for w in texts if len(w.input_ids) >= length][:TRACE_WINDOWS]
    if length < 2:
        raise UnsupportedModel("Tracing norm placement needs windows of at least 2 tokens.", hint="Raise --seq-len.")
    return torch.tensor(rows, device=device)


def measure_depth(
    loaded: LoadedModel,
    stack: LayerStack,
    windows: Sequence[Window | ImageWindow],
    positions: str,
    batch_size: int,
    sublayers: list[BlockSublayers | None],
    on_batch: Callable[[int], None] | None = None,
) -> DepthAccumulator:
    """Run the windows through the model once, accumulating residual and sublayer statistics.

    `positions="all"` measures every position; `"last"` the last text token of each window.
    """
    import torch

    model = stack.root
    absent = image_only_blocks(stack)  # mllama's image-only blocks: a text-only pass skips them
    accumulator = DepthAccumulator(stack.num_layers, SUBLAYER_KINDS if any(sublayers) else (), absent)
    tower = tower_of(stack)
    with (
        torch.inference_mode(),
        capture_block_states(stack, absent) as captured,
        sublayer_ratios(stack, sublayers) as ratios,
    ):
        for group in batches(windows, batch_size):
            inputs = model_inputs(group, loaded.input_device)
            captured.clear()
            ratios.clear()
            run_tower(model, tower, inputs)
            if len(captured) != stack.num_layers + 1:
                raise RuntimeError(f"captured {len(captured)} states for {stack.num_layers} blocks")
            states = [residual_view(stack, s) for s in captured]  # Gemma-3n: its active AltUp stream
            check_state_shapes(loaded.architecture, states, inputs)
            lead = tuple(states[0].shape[:2])
            pick = _picker(group, positions)
            accumulator.add_states([pick(s) for s in states])
            for (layer, kind), values in ratios.items():
                accumulator.add_sublayer(kind, layer, pick(values.reshape(lead)))
            captured.clear()
            ratios.clear()
            if on_batch:
                on_batch(lead[0] * lead[1])
    return accumulator


def _picker(group: Sequence[Window | ImageWindow], positions: str) -> Callable[[torch.Tensor], torch.Tensor]:
    """(batch, seq, ...) → (positions, ...): every position, or each window's last text token."""
    import torch

    if positions == "all":
        return lambda t: t.reshape(-1, *t.shape[2:])
    rows = torch.arange(len(group))
    last = torch.tensor([w.last_text_position for w in group])
    return lambda t: t[rows.to(t.device), last.to(t.device)]


@contextlib.contextmanager
def sublayer_ratios(
    stack: LayerStack, sublayers: list[BlockSublayers | None]
) -> Iterator[dict[SublayerKey, torch.Tensor]]:
    """Record ‖f‖/‖r‖ per position for every found sublayer during the passes run inside.

    Yields a dict (block, kind) → (batch·seq,) float64 values, filled by hooks placed where the trace
    found each sublayer's residual r (block input, or a module's input or output) and contribution f.
    """
    ratios: dict[SublayerKey, torch.Tensor] = {}
    residuals: dict[SublayerKey, torch.Tensor] = {}
    handles: list[RemovableHandle] = []
    for layer, (block, subs) in enumerate(zip(stack.blocks, sublayers, strict=True)):
        if subs is None:
            continue
        for sub in subs:
            key = (layer, sub.kind)
            handles.append(_residual_hook(block, sub.residual, key, residuals))

            def contribution(
                _module: nn.Module, _args: tuple[object, ...], output: object, key: SublayerKey = key
            ) -> None:
                residual = residuals.pop(key, None)
                if residual is None:
                    return
                f = hidden_from_output(output)
                ratios[key] = relative_size(f.reshape(-1, f.shape[-1]), residual.reshape(-1, residual.shape[-1]))

            handles.append(block.get_submodule(sub.module).register_forward_hook(contribution))
    try:
        yield ratios
    finally:
        for handle in handles:
            handle.remove()


def _residual_hook(
    block: nn.Module, ref: ResidualRef, key: SublayerKey, store: dict[SublayerKey, torch.Tensor]
) -> RemovableHandle:
    """A hook that stores the residual of sublayer `key` in `store` when the block runs."""
    if ref.kind == "block input":
        return block.register_forward_pre_hook(
            lambda _m, args, kwargs: store.__setitem__(key, hidden_from_input(args, kwargs)), with_kwargs=True
        )
    assert ref.module is not None  # a module's input or output names its module
    module = block.get_submodule(ref.module)
    if ref.kind == "input":

        def before(_m: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:  # the module's inputs
            index = ref.key
            if isinstance(index, int):
                value = args[index] if index < len(args) else None
            else:
                value = None if index is None else kwargs.get(index)
            if value is not None:
                store[key] = value

        return module.register_forward_pre_hook(before, with_kwargs=True)
    return module.register_forward_hook(lambda _m, _a, output: store.__setitem__(key, hidden_from_output(output)))
