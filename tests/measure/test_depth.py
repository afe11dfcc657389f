"""`layerprobe depth`: every statistic against an independent float64 computation with the test's own hooks."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import transformers as tf
from factories import DEPTH_SEQ, DEPTH_TOKENS, depth_spec, depth_windows

from layerprobe.measure.depth import run_depth

# Where each sublayer's output and residual are, known by construction (never by the code under test).
KNOWN = {
    "llama": {
        "attention": ("self_attn", ("block", None)),
        "mlp": ("mlp", ("input", "post_attention_layernorm")),
    },
    "bert": {
        "attention": ("attention.output.dense", ("block", None)),
        "mlp": ("output.dense", ("output", "attention")),
    },
}


def _reference(path: Path, arch: str, positions: str = "all") -> dict:
    """x^0 … x^L and sublayer (f, r) from the test's own hooks on a float64 copy; statistics in float64."""
    model = tf.AutoModel.from_pretrained(path).double().eval()
    blocks = model.layers if arch == "llama" else model.encoder.layer
    windows = depth_windows(path)
    states: list = []
    captured: dict = {}
    handles = []
    for l, block in enumerate(blocks):
        handles.append(
            block.register_forward_pre_hook(
                lambda m, a, k: states.append(a[0] if a else k["hidden_states"]), with_kwargs=True
            )
        )
        for kind, (out_name, (where, name)) in KNOWN[arch].items():
            handles.append(
                block.get_submodule(out_name).register_forward_hook(
                    lambda m, a, o, l=l, kind=kind: captured.__setitem__(
                        (l, kind, "f"), o[0] if isinstance(o, tuple) else o
                    )
                )
            )
            if where == "input":
                handles.append(
                    block.get_submodule(name).register_forward_pre_hook(
                        lambda m, a, l=l, kind=kind: captured.__setitem__((l, kind, "r"), a[0])
                    )
                )
            elif where == "output":
                handles.append(
                    block.get_submodule(name).register_forward_hook(
                        lambda m, a, o, l=l, kind=kind: captured.__setitem__(
                            (l, kind, "r"), o[0] if isinstance(o, tuple) else o
                        )
                    )
                )
            else:
                handles.append(
                    block.register_forward_pre_hook(
                        lambda m, a, k, l=l, kind=kind: captured.__setitem__(
                            (l, kind, "r"), a[0] if a else k["hidden_states"]
                        ),
                        with_kwargs=True,
                    )
                )
    handles.append(blocks[-1].register_forward_hook(lambda m, a, o: states.append(o[0] if isinstance(o, tuple) else o)))
    L = len(blocks)
    values = {"rms": [[] for _ in range(L + 1)], "var": [[] for _ in range(L + 1)], "upd": [[] for _ in range(L)]}
    values.update({k: [[] for _ in range(L)] for k in ("attention", "mlp")})
    with torch.no_grad():
        for w in windows:
            states.clear()
            captured.clear()
            model(input_ids=torch.tensor([w.input_ids]))
            last = w.last_text_position
            pick = (lambda t: t[0]) if positions == "all" else (lambda t, last=last: t[0, last : last + 1])
            xs = [pick(s) for s in states]
            for l, x in enumerate(xs):
                d = x.shape[-1]
                values["rms"][l].append(torch.sqrt((x * x).sum(-1) / d))
                mu = x.mean(-1, keepdim=True)
                values["var"][l].append(((x - mu) ** 2).sum(-1) / d)
                if l < L:
                    values["upd"][l].append(
                        torch.linalg.vector_norm(xs[l + 1] - x, dim=-1) / torch.linalg.vector_norm(x, dim=-1)
                    )
            for l in range(L):
                for kind in ("attention", "mlp"):
                    f, r = pick(captured[(l, kind, "f")]), pick(captured[(l, kind, "r")])
                    values[kind][l].append(torch.linalg.vector_norm(f, dim=-1) / torch.linalg.vector_norm(r, dim=-1))
    for h in handles:
        h.remove()
    out = {}
    for key, per_index in values.items():
        cat = [torch.cat(v) for v in per_index]
        out[key] = {"mean": [float(c.mean()) for c in cat], "std": [float(c.std(unbiased=False)) for c in cat]}
    return out


def _close(got: list[float], want: list[float], rel: float) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g == pytest.approx(w, rel=rel, abs=1e-12)


@pytest.mark.parametrize("arch", ["llama", "bert"])
def test_statistics_match_an_independent_float64_computation(three_block_checkpoints, arch):
    result = run_depth(depth_spec(three_block_checkpoints[arch], batch_size=2))
    ref = _reference(three_block_checkpoints[arch], arch)
    # The model runs in float32 here and in float64 in the reference: agreement to float32 accuracy.
    for ours, key in ((result.rms, "rms"), (result.variance, "var"), (result.update, "upd")):
        _close(ours.mean, ref[key]["mean"], 2e-4)
        _close(ours.std, ref[key]["std"], 2e-3)
    for kind in ("attention", "mlp"):
        _close(result.sublayers[kind]["relative"].mean, ref[kind]["mean"], 2e-4)
        _close(result.sublayers[kind]["relative"].std, ref[kind]["std"], 2e-3)
        assert result.sublayers[kind]["modules"] == [KNOWN[arch][kind][0]] * 3
    assert result.data["positions_averaged"] == DEPTH_TOKENS == result.rms.count[0]
    assert result.placement.pattern == ("Pre-LN" if arch == "llama" else "Post-LN")
    summary = result.to_dict()["summary"]
    assert summary["rms_growth"] == pytest.approx(result.rms.mean[-1] / result.rms.mean[0])


def test_last_positions_and_batch_size_independence(three_block_checkpoints):
    path = three_block_checkpoints["llama"]
    one, three = (
        run_depth(depth_spec(path, batch_size=1, positions="last")),
        run_depth(depth_spec(path, batch_size=3, positions="last")),
    )
    ref = _reference(path, "llama", positions="last")
    _close(one.rms.mean, ref["rms"]["mean"], 2e-4)
    _close(one.update.mean, ref["upd"]["mean"], 2e-4)
    _close(one.update.std, three.update.std, 1e-9)  # Chan's merge is exact whatever the batching
    assert one.data["positions_averaged"] == DEPTH_TOKENS // DEPTH_SEQ
