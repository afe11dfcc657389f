"""Where each block normalises, decided by tracing its data flow, never from module names.

For every block the replay (`trace.trace_block`) and its two sublayers (`sublayers.py`) are read as
follows, each sublayer with residual r, contribution f and sum s = r + f:

- a *norm* is a module whose output, at every position, is a per-unit affine map of its input
  standardised (LayerNorm) or divided by its RMS (RMSNorm): out_j = g_j · z_j + b_j, fitted by least
  squares over the traced positions;
- **Pre-LN**: f reads a norm whose input is r, and s flows on unnormalised;
- **Post-LN**: a norm takes s and its output is the next residual (or the block output);
- **sandwich** (Gemma-2/3, Peri-LN): Pre-LN, and f itself is a norm's output;
- **parallel** (GPT-J, GPT-NeoX): both sublayers read norms of the same r and s = r + f_attn + f_mlp;
- **LayerNorm Scaling**: some tensor in the block equals c × a norm's output with c ≠ 1; across
  blocks, c = 1/√(l+1) is the Curse-of-Depth paper's 1/√ℓ (ℓ 1-based).

Any other combination is reported as "unrecognised", with the reason; the label is never guessed.
The model summary names runs of equal labels, and "Post-LN in blocks 0–k-1, Pre-LN in k–L-1" as
Mix-LN with transition at k.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from layerprobe.core import UnsupportedModel
from layerprobe.model.stack import BlockArgs, BlockKwargs, LayerStack
from layerprobe.model.sublayers import BlockSublayers, Contribution, match_contributions, sublayers_from_trace
from layerprobe.model.trace import BlockTrace, Recorded, capture_block_calls, trace_block
from layerprobe.results import (
    LNS,
    MIX_LN,
    PARALLEL,
    POST_LN,
    PRE_LN,
    SANDWICH,
    UNRECOGNISED,
    BlockPlacement,
    Placement,
    SublayerPlacement,
)

if TYPE_CHECKING:
    import torch
    from torch import nn

Norms = dict[str, tuple[str, Recorded]]  # module path → (LayerNorm | RMSNorm, its recorded output)

_FIT_TOLERANCE = 1e-4  # relative least-squares residual below which a module is a norm
_SCALE_TOLERANCE = 1e-6
_EPS = (0.0, *(10.0**-k for k in range(2, 13)))  # a norm output scaled by c ≠ 1 by more than this


SKIPPED_REASON = "a cross-attention block that runs only with an image: a text-only pass skips it"


def detect_placement(
    model: nn.Module, stack: LayerStack, input_ids: torch.Tensor | dict[str, torch.Tensor]
) -> tuple[Placement, list[BlockSublayers | None]]:
    """Trace every block of `stack` once (one forward pass of `model` on `input_ids`, then one replay each).

    Args:
        model: the model holding `stack` (base model or with a head).
        stack: its blocks (`stack.find_layers`).
        input_ids: (batch, seq) token ids, seq >= 2; a few real windows are plenty. A vision stack:
            its tower's inputs (`{"pixel_values": ...}`), a few images.

    Returns:
        The placement, and each block's sublayers (None where they could not be found).
    """
    calls = capture_block_calls(model, stack, input_ids)
    blocks: list[BlockPlacement] = []
    sublayers: list[BlockSublayers | None] = []
    for index, block in enumerate(stack.blocks):
        if index not in calls:  # an image-only block (mllama) that a text-only pass skips
            blocks.append(BlockPlacement(index, UNRECOGNISED, reason=SKIPPED_REASON))
            sublayers.append(None)
            continue
        placed, subs = place_block(index, block, *calls[index])
        blocks.append(placed)
        sublayers.append(subs)
    return summarise(blocks), sublayers


def place_block(
    index: int, block: nn.Module, args: BlockArgs, kwargs: BlockKwargs
) -> tuple[BlockPlacement, BlockSublayers | None]:
    """Label one block from one traced call (see the module docstring); untraceable → unrecognised."""
    try:
        trace = trace_block(block, args, kwargs)
    except UnsupportedModel as exc:
        return BlockPlacement(index, UNRECOGNISED, reason=exc.message), None
    norms = find_norms(trace)
    scale = norm_output_scale(trace, norms)
    kinds = {path: kind for path, (kind, _) in norms.items()}
    try:
        subs = sublayers_from_trace(trace)
    except UnsupportedModel as exc:
        return BlockPlacement(index, UNRECOGNISED, kinds, scale, reason=exc.message), None
    contributions, parallel = match_contributions(trace)
    by_module = {c.modules[0]: c for c in contributions}
    attention, mlp = by_module[subs.attention.module], by_module[subs.mlp.module]
    after_attention = trace.y if parallel else mlp.residual.tensor
    flags = [
        _sublayer_flags(trace, norms, attention, after_attention),
        _sublayer_flags(trace, norms, mlp, trace.y),
    ]
    label, reason = _label(flags, parallel, bool(norms))
    return BlockPlacement(index, label, kinds, scale, flags[0], flags[1], reason), subs


def find_norms(trace: BlockTrace) -> Norms:
    """Modules that act as LayerNorm or RMSNorm on the traced positions: path → (kind, recorded output)."""
    found: Norms = {}
    for path, call in trace.calls.items():
        if call.single_input is None or call.output is None:
            continue
        kind = norm_kind(call.single_input.detach(), call.output.tensor.detach(), trace)
        if kind:
            found[path] = (kind, call.output)
    return found


def norm_kind(inputs: torch.Tensor, outputs: torch.Tensor, trace: BlockTrace | None = None) -> str | None:
    """Say "LayerNorm" or "RMSNorm" if out_j = g_j·z_j + b_j per hidden unit j for the matching z, else None.

    Args:
        inputs: (..., hidden) input of one module call; all leading dims are positions.
        outputs: its (..., hidden) output.
        trace: the trace the call comes from (its tolerance tells an identity apart), if any.
    """
    import torch

    u = inputs.reshape(-1, inputs.shape[-1]).double()
    v = outputs.reshape(-1, outputs.shape[-1]).double()
    if u.shape != v.shape or u.shape[0] < 3 or torch.equal(u, v) or (trace is not None and trace.same(u, v)):
        return None
    centred = u - u.mean(-1, keepdim=True)
    # Norms add a small eps to the variance; at small activations (embeddings) it matters, so try the usual ones.
    for kind, base in (("LayerNorm", centred), ("RMSNorm", u)):
        power = base.pow(2).mean(-1, keepdim=True)
        if min(_affine_residual(base / (power + eps).sqrt().clamp_min(1e-300), v) for eps in _EPS) <= _FIT_TOLERANCE:
            return kind
    return None


def _affine_residual(z: torch.Tensor, v: torch.Tensor) -> float:
    """Relative residual of the per-column least-squares fit v[:, j] ≈ g_j z[:, j] + b_j."""
    zc, vc = z - z.mean(0), v - v.mean(0)
    denom = zc.pow(2).sum(0)
    gain = (zc * vc).sum(0) / denom.clamp_min(1e-300)
    fitted = gain * zc
    residual = (vc - fitted).pow(2).sum()
    return float(residual.sqrt() / (vc.pow(2).sum().sqrt() + 1e-300))


def norm_output_scale(trace: BlockTrace, norms: Norms) -> float | None:
    """The constant c with (some hidden-shaped tensor) = c × (a norm's output), c ≠ 1; None if none.

    When several norms are scaled, the block's value is their common c (they agree under LNS).
    """
    scales = []
    for _, output in norms.values():
        n = output.tensor.detach().double()
        nn_ = float((n * n).sum())
        if nn_ == 0.0:
            continue
        for item in trace.recorded:
            t = item.tensor.detach().double()
            if item.order <= output.order or t.shape != n.shape:  # only what comes after the norm
                continue
            c = float((t * n).sum()) / nn_
            if abs(c - 1.0) <= _SCALE_TOLERANCE or c == 0.0:
                continue
            if float((t - c * n).pow(2).sum().sqrt()) <= 1e-6 * float(t.pow(2).sum().sqrt()):
                scales.append(c)
    if not scales:
        return None
    return float(sum(scales) / len(scales))


def _sublayer_flags(
    trace: BlockTrace, norms: Norms, contribution: Contribution, after: torch.Tensor
) -> SublayerPlacement:
    """Where one sublayer meets a norm: on its input, on its output, or on the sum after it."""
    norm_paths = list(norms)
    outputs = [norms[p][1].tensor for p in norm_paths]
    # A norm is found from its one input (`find_norms`), so every norm has one.
    inputs = [single for p in norm_paths if (single := trace.calls[p].single_input) is not None]
    reads = trace.depends(contribution.output.tensor, [norms[p][1].source for p in norm_paths]) if outputs else []
    reads_norm = any(
        read and trace.same(inp, contribution.residual.tensor) for read, inp in zip(reads, inputs, strict=True)
    )
    output_norm = any(m in norms for m in contribution.modules) or any(
        trace.same(out, contribution.output.tensor) for out in outputs
    )
    total = contribution.total.tensor
    normed_after = not trace.same(after, total) and any(
        trace.same(inp, total) and trace.same(out, after) for inp, out in zip(inputs, outputs, strict=True)
    )
    return SublayerPlacement(
        module=contribution.modules[0],
        residual=str(contribution.residual.ref),
        reads_norm=reads_norm,
        output_norm=output_norm,
        normed_after=normed_after,
    )


def _label(flags: list[SublayerPlacement], parallel: bool, any_norm: bool) -> tuple[str, str | None]:
    if not any_norm:
        return UNRECOGNISED, "no module in the block normalises its input"
    pre = all(f.reads_norm and not f.normed_after for f in flags)
    if parallel:
        if pre and not any(f.output_norm for f in flags):
            return PARALLEL, None
        return UNRECOGNISED, f"parallel block with norms {_describe(flags)}"
    if pre and not any(f.output_norm for f in flags):
        return PRE_LN, None
    if pre and all(f.output_norm for f in flags):
        return SANDWICH, None
    if all(f.normed_after and not f.reads_norm and not f.output_norm for f in flags):
        return POST_LN, None
    return UNRECOGNISED, f"norms {_describe(flags)}"


def _describe(flags: list[SublayerPlacement]) -> str:
    parts = []
    for name, f in zip(("attention", "MLP"), flags, strict=True):
        where = [w for w, on in (("input", f.reads_norm), ("output", f.output_norm), ("sum", f.normed_after)) if on]
        parts.append(f"{name}: {'+'.join(where) or 'none'}")
    return "; ".join(parts)


def summarise(blocks: list[BlockPlacement]) -> Placement:
    """The model-level pattern and a one-line summary from per-block labels and norm scales."""
    labels = [b.label for b in blocks]
    runs = _runs(labels)
    text = ", ".join(_run_text(label, start, end, len(labels)) for label, start, end in runs)
    transition = None
    if len(runs) == 1:
        pattern = labels[0]
    elif len(runs) == 2 and runs[0][0] == POST_LN and runs[1][0] == PRE_LN:
        pattern, transition = MIX_LN, runs[1][1]
        text += f": Mix-LN, transition at {transition}"
    elif UNRECOGNISED in labels:
        pattern = UNRECOGNISED
    else:
        pattern = "mixed"
    scales = [b.norm_scale if b.norm_scale is not None else 1.0 for b in blocks]
    if any(b.norm_scale is not None for b in blocks):
        if all(math.isclose(s, 1 / math.sqrt(l + 1), rel_tol=1e-4) for l, s in enumerate(scales)):
            text += " with LayerNorm Scaling (norm outputs × 1/√(l+1))"
            if pattern == PRE_LN:
                pattern = LNS
        else:
            shown = ", ".join(f"{s:.3g}" for s in scales)
            text += f" with norm outputs scaled per block ({shown})"
    return Placement(blocks, pattern, text, transition)


def _runs(labels: list[str]) -> list[tuple[str, int, int]]:
    runs: list[tuple[str, int, int]] = []
    for index, label in enumerate(labels):
        if runs and runs[-1][0] == label:
            runs[-1] = (label, runs[-1][1], index)
        else:
            runs.append((label, index, index))
    return runs


def _run_text(label: str, start: int, end: int, total: int) -> str:
    if start == 0 and end == total - 1:
        return f"{label} in all {total} blocks"
    where = f"block {start}" if start == end else f"blocks {start}–{end}"
    return f"{label} in {where}"
