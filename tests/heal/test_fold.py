"""The linear fold against independent computations: numpy's least squares, and T applied by a hook.

- T from the library's streamed normal equations equals numpy's lstsq on activations the test records
  with its own hooks, in float64;
- the folded weights compute the pruned model with T applied explicitly to the block before the cut
  (a forward hook written here), for a Pre-LN (LLaMA), a parallel-residual (GPT-NeoX) and two MoE families;
- on a model whose removed block adds exactly A·m (m: the MLP output of the block before), the fitted
  map is A and the healed logits equal the original's;
- Post-LN and sandwich blocks are refused in one line.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from factories import small_model
from torch import nn

from layerprobe.core import UnsupportedModel
from layerprobe.data import Window
from layerprobe.heal import find_sites, folded, spans_of
from layerprobe.heal.linear import calibrate, check_fold
from layerprobe.model import find_layers, removed_blocks

MLP_PATH = {"llama": "mlp", "qwen2_moe": "mlp", "qwen3_moe": "mlp", "mistral": "mlp"}


def _ids(seed: int, rows: int = 4, length: int = 24, vocab: int = 128) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(3, vocab, (rows, length), generator=generator)


def _windows(ids: torch.Tensor) -> list[Window]:
    return [Window(row.tolist(), len(row) - 1) for row in ids]


def _reference_records(model, family, start, end, ids):
    """(c, x^end − x^start) for every position, recorded by the test's own hooks, float64."""
    blocks = find_layers(model).blocks
    got = {}

    def keep(name):
        def hook(_m, args, kwargs, output=None):
            got[name] = args[0] if args else kwargs["hidden_states"]

        return hook

    handles = [blocks[start].register_forward_pre_hook(keep("start"), with_kwargs=True)]
    handles.append(blocks[start - 1].register_forward_pre_hook(keep("before"), with_kwargs=True))
    if end < len(blocks):
        handles.append(blocks[end].register_forward_pre_hook(keep("end"), with_kwargs=True))
    else:
        handles.append(blocks[end - 1].register_forward_hook(lambda _m, _a, out: got.__setitem__("end", out)))
    if family in MLP_PATH:
        mlp = blocks[start - 1].get_submodule(MLP_PATH[family])
        handles.append(mlp.register_forward_hook(lambda _m, _a, out: got.__setitem__("mlp", out)))
    with torch.no_grad():
        model(input_ids=ids, use_cache=False)
    for h in handles:
        h.remove()
    first = lambda t: t[0] if isinstance(t, tuple) else t  # noqa: E731
    start_x = first(got["start"]).double()
    c = first(got["mlp"]).double() if family in MLP_PATH else start_x - first(got["before"]).double()
    y = first(got["end"]).double() - start_x
    return c.reshape(-1, c.shape[-1]).numpy(), y.reshape(-1, y.shape[-1]).numpy()


def _explicit(model, family, start, end, transform, ids):
    """Logits of the pruned model with block start−1's output plus T·c, c recorded by the test's hooks."""
    stack = find_layers(model)
    block = stack.blocks[start - 1]
    seen = {}
    t = torch.as_tensor(transform, dtype=torch.float32)
    handles = []
    if family in MLP_PATH:
        mlp = block.get_submodule(MLP_PATH[family])
        handles.append(mlp.register_forward_hook(lambda _m, _a, out: seen.__setitem__("c", out)))
    else:
        handles.append(
            block.register_forward_pre_hook(
                lambda _m, a, k: seen.__setitem__("x", a[0] if a else k["hidden_states"]), with_kwargs=True
            )
        )

    def add(_m, _a, out):
        hidden = out[0] if isinstance(out, tuple) else out
        c = seen.get("c")
        c = (c[0] if isinstance(c, tuple) else c) if c is not None else hidden - seen["x"]
        new = hidden + c @ t.T
        return (new, *out[1:]) if isinstance(out, tuple) else new

    handles.append(block.register_forward_hook(add))
    try:
        with torch.no_grad(), removed_blocks(stack, list(range(start, end))):
            return model(input_ids=ids, use_cache=False).logits
    finally:
        for h in handles:
            h.remove()


@pytest.mark.slow  # ~15 s on CI's CPUs: the first pass of the session's LLaMA
def test_map_equals_numpy_least_squares():
    model = small_model("llama")
    stack = find_layers(model)
    ids = _ids(0)
    sites = find_sites(model, stack, [2], ids[:1])
    equations = calibrate(model, stack, sites, _windows(ids), 2, torch.device("cpu"), 32)
    c, y = _reference_records(model, "llama", 2, 3, ids)
    expected, *_ = np.linalg.lstsq(c, y, rcond=None)
    np.testing.assert_allclose(equations[0].solve(), expected.T, rtol=1e-6, atol=1e-8)
    assert equations[0].rows == ids.numel()
    # ridge: (CᵀC + λ s I)⁻¹ CᵀY with s = trace(CᵀC)/d, from an augmented least-squares problem in numpy
    scale = np.trace(c.T @ c) / c.shape[1]
    lam = 0.05
    augmented_c = np.vstack([c, np.sqrt(lam * scale) * np.eye(c.shape[1])])
    augmented_y = np.vstack([y, np.zeros((c.shape[1], y.shape[1]))])
    ridge, *_ = np.linalg.lstsq(augmented_c, augmented_y, rcond=None)
    np.testing.assert_allclose(equations[0].solve(lam), ridge.T, rtol=1e-6, atol=1e-8)
    residual = ((y - c @ expected) ** 2).sum() / (y**2).sum()
    assert equations[0].relative_residual(expected.T) == pytest.approx(residual, rel=1e-6)


@pytest.mark.parametrize(("family", "removed"), [("llama", [2]), ("gpt_neox", [1, 2]), ("qwen2_moe", [2, 3])])
def test_fold_equals_map_applied_by_hook(family, removed):
    model = small_model(family)
    stack = find_layers(model)
    ids = _ids(1)
    sites = find_sites(model, stack, removed, ids[:1])
    assert [(s.start, s.end) for s in sites] == spans_of(removed)
    rng = np.random.default_rng(0)
    maps = [rng.normal(0, 0.2, (32, 32)) for _ in sites]
    check_fold(model, stack, sites, maps, ids[:1])
    start, end = spans_of(removed)[0]
    expected = _explicit(model, family, start, end, maps[0], ids)
    with torch.no_grad(), folded(stack, sites, maps), removed_blocks(stack, removed):
        got = model(input_ids=ids, use_cache=False).logits
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
    with torch.no_grad(), removed_blocks(stack, removed):  # the fold was put back on exit
        plain = model(input_ids=ids, use_cache=False).logits
    assert not torch.allclose(plain, expected, atol=1e-3)


def test_fold_into_fused_experts():
    """Qwen3-MoE: every block's MLP is routed experts only (3D fused weights), folded expert by expert."""
    model = small_model("qwen3_moe")
    stack = find_layers(model)
    ids = _ids(2)
    sites = find_sites(model, stack, [2], ids[:1])
    assert any(t.layout.startswith("experts") for t in sites[0].targets)
    maps = [np.random.default_rng(1).normal(0, 0.2, (32, 32))]
    expected = _explicit(model, "qwen3_moe", 2, 3, maps[0], ids)
    with torch.no_grad(), folded(stack, sites, maps), removed_blocks(stack, [2]):
        got = model(input_ids=ids, use_cache=False).logits
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)


class AddsLinearOfMlp(nn.Module):
    """A stand-in for a removed block: adds A·m, m the MLP output of the block before (read from a slot)."""

    def __init__(self, block, slot, matrix):
        super().__init__()
        self.inner, self.slot = block, slot
        self.matrix = torch.as_tensor(matrix, dtype=torch.float32)
        self.attention_type = getattr(block, "attention_type", None)

    def forward(self, hidden_states, *args, **kwargs):
        return hidden_states + self.slot["m"] @ self.matrix.T


def test_linear_span_is_recovered_exactly():
    model = small_model("llama")
    stack = find_layers(model)
    slot = {}
    stack.blocks[1].mlp.register_forward_hook(lambda _m, _a, out: slot.__setitem__("m", out))
    matrix = np.random.default_rng(3).normal(0, 0.3, (32, 32))
    stack.blocks[2] = AddsLinearOfMlp(stack.blocks[2], slot, matrix)
    ids = _ids(4, rows=6, length=32)
    with torch.no_grad():
        original = model(input_ids=ids, use_cache=False).logits
    sites = find_sites(model, stack, [2], ids[:1])
    equations = calibrate(model, stack, sites, _windows(ids), 3, torch.device("cpu"), 32)
    fitted = equations[0].solve()
    np.testing.assert_allclose(fitted, matrix, atol=1e-4)
    with torch.no_grad(), removed_blocks(stack, [2]):
        pruned = model(input_ids=ids, use_cache=False).logits
    with torch.no_grad(), folded(stack, sites, [fitted]), removed_blocks(stack, [2]):
        healed = model(input_ids=ids, use_cache=False).logits
    assert not torch.allclose(pruned, original, atol=1e-3)  # the cut costs something: healing has work to do
    torch.testing.assert_close(healed, original, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(("family", "words"), [("bert", "Post-LN"), ("gemma2", "sandwich")])
def test_refuses_families_where_the_fold_is_not_exact(family, words):
    model = small_model(family)
    stack = find_layers(model)
    with pytest.raises(UnsupportedModel, match=words) as caught:
        find_sites(model, stack, [2], _ids(5, vocab=100)[:1])
    assert "\n" not in caught.value.message
