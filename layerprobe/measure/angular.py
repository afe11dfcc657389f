"""`layerprobe angular`: the angular-distance matrix between the inputs of every pair of blocks, in one pass.

d(x^i, x^j) = arccos(cos(x^i, x^j)) / π, averaged over measured positions (Gromov et al. 2024;
Mix-LN eq. 8). Every pair (i, j) comes from the same captured states, so one pass over the corpus
gives the whole (L+1)×(L+1) matrix instead of one pass per span. This module runs that pass (on one
process or shared among several) and builds the result; the distances and their running sums are
`distance.py`'s.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from layerprobe.core import DEFAULT_CHUNK_BYTES, AngularSpec
from layerprobe.data import ImageWindow, Window, batches, images_before_loading, pack_corpus, windows_before_loading
from layerprobe.measure.distance import AccumulatorTotals, AngularAccumulator
from layerprobe.measure.inputs import check_state_shapes, image_record, measured_tokens, model_inputs, note_stack
from layerprobe.model import (
    LayerStack,
    LoadedModel,
    Progress,
    World,
    capture_block_states,
    check_loadable,
    find_layers,
    image_only_blocks,
    load_model,
    model_info,
    residual_view,
    run_tower,
    skeleton_stack,
    tower_of,
)
from layerprobe.model import world as distributed_world
from layerprobe.results import AngularResult, RunTimer


def measure(
    loaded: LoadedModel,
    stack: LayerStack,
    windows: Sequence[Window | ImageWindow],
    positions: str,
    batch_size: int,
    on_batch: Callable[[int], None] | None = None,
    max_state_bytes: int = DEFAULT_CHUNK_BYTES,
    world: World | None = None,
) -> AngularAccumulator:
    """Run the windows through the model once, accumulating distances at the chosen positions.

    `positions="all"` measures every position; `"last"` the last text token of each window. The states
    of one batch stay on the devices that computed them (several GPUs under --device-map); the
    accumulator gathers at most `max_state_bytes` of them (fp32, all depths) onto its device at a time.
    Launched on several processes (`world`), each runs every world.size-th batch into a fresh accumulator,
    and the batches' totals are added in one-process order on every rank: the result is identical to one
    process's.
    """
    import torch

    world = world or World()
    absent = image_only_blocks(stack)  # mllama's image-only blocks: a text-only pass skips them
    accumulator = AngularAccumulator(
        stack.num_layers + 1, device=loaded.input_device, chunk_bytes=max_state_bytes, absent=absent
    )
    totals_by_batch: dict[int, AccumulatorTotals] = {}
    tower = tower_of(stack)
    with torch.inference_mode(), capture_block_states(stack, absent) as captured:
        for index, group in enumerate(batches(windows, batch_size)):
            if index % world.size != world.rank:
                continue
            inputs = model_inputs(group, loaded.input_device)
            captured.clear()
            run_tower(loaded.model, tower, inputs)
            if len(captured) != stack.num_layers + 1:
                raise RuntimeError(
                    f"captured {len(captured)} states for {stack.num_layers} blocks; "
                    "a block was called more or less than once per forward pass"
                )
            states = [residual_view(stack, s) for s in captured]  # Gemma-3n: its active AltUp stream
            check_state_shapes(loaded.architecture, states, inputs)
            if positions == "all":
                flat = [s.reshape(-1, s.shape[-1]) for s in states]
                sizes = [states[0].shape[1]] * len(group)
            else:
                rows = torch.arange(len(group))
                last = torch.tensor([w.last_text_position for w in group])
                flat = [s[rows.to(s.device), last.to(s.device)] for s in states]  # states may span GPUs
                sizes = [1] * len(group)
            if world.size == 1:
                accumulator.update(flat, sizes)  # each window is one sample for the standard error
            else:
                piece = AngularAccumulator(
                    stack.num_layers + 1, device=loaded.input_device, chunk_bytes=max_state_bytes, absent=absent
                )
                piece.update(flat, sizes)
                totals_by_batch[index] = piece.totals()
            measured = states[0].shape[0] * states[0].shape[1]
            captured.clear()
            states.clear()
            if on_batch:
                on_batch(measured)
    if world.size > 1:  # (L+1)² and L³ fp64 totals per batch: small next to the model every rank holds
        gathered = {i: t for piece in world.gather(totals_by_batch) for i, t in piece.items()}
        for index in sorted(gathered):
            accumulator.add(gathered[index])
    return accumulator


def run_angular(
    spec: AngularSpec,
    progress: Progress | None = None,
    loaded: LoadedModel | None = None,
    world: World | None = None,
    windows: Sequence[Window | ImageWindow] | None = None,
) -> AngularResult:
    """Load the model (unless given), build the windows (unless given, packed from `spec.corpus` for `loaded`), measure.

    Under `accelerate launch`/`torchrun` (see layerprobe.model.ranks) every rank measures a share of the
    batches and every rank returns the same, whole result; the caller writes it on rank 0 only.
    """
    progress = progress or Progress()
    world = world or distributed_world()
    timer = RunTimer()
    progress.stage("Reading corpus", spec.corpus.tokens, "tok")
    if loaded is None:  # everything cheap (config, tokenizer, the whole corpus) before any weight is read
        # e.g. bitsandbytes missing for --load-in-4bit: before streaming a corpus
        check_loadable(spec.model, progress.note)
        skeleton_stack(spec.model)
        images = images_before_loading(spec.model, spec.corpus)
        if images is None:
            tokenizer, windows, seq_len = windows_before_loading(spec.model, spec.corpus, progress.on_advance)
        else:
            tokenizer, pictures = images
            windows, seq_len = pictures, pictures[0].patches
        progress.stage("Loading model")
        loaded = load_model(spec.model, purpose="base", tokenizer=tokenizer)
    else:
        seq_len = min(spec.corpus.seq_len, loaded.context_length or spec.corpus.seq_len)
        if windows is None:
            windows = pack_corpus(loaded.tokenizer, spec.corpus, seq_len, progress.on_advance)
    stack = find_layers(loaded.model, spec.model.layers_path)
    if world.is_main:
        note_stack(stack, progress)
    progress.stage("Measuring", spec.corpus.tokens, "tok")
    measure_clock = time.perf_counter()
    accumulator = measure(
        loaded, stack, windows, spec.positions, spec.batch_size, progress.on_advance, spec.max_state_bytes, world
    )
    measure_seconds = time.perf_counter() - measure_clock
    corpus = spec.corpus
    tokens = measured_tokens(windows, accumulator.window_positions, spec.positions)
    data = {
        **corpus.record(tokens=tokens, seq_len=seq_len),
        "windows": len(windows),
        "positions": spec.positions,
        "positions_averaged": accumulator.count,
        **image_record(windows, accumulator.window_positions, spec.positions),
    }
    return AngularResult(
        model=model_info(loaded, stack),
        data=data,
        distance=accumulator.result(),
        distance_stderr=accumulator.stderr(),
        row_difference_stderr=accumulator.row_difference_stderr(),
        nonfinite_tokens=accumulator.nonfinite,
        nonfinite_positions=accumulator.nonfinite_positions(),
        adjacent_windows=accumulator.adjacent_windows(),
        window_positions=list(accumulator.window_positions),
        run=timer.finish(loaded.device_label),
        tokens_per_second=tokens / measure_seconds if measure_seconds > 0 else 0.0,
    )
