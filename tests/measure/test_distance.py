"""The angular distance and its accumulator against float64 computations per position and per window.

Non-finite states spoil only their own pairs; chunks and updates never change a result; the standard
errors (of each entry, and of each entry minus its row's minimum) are the window-level ones.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from reference import pairwise_float64, ratio_estimate, row_difference_reference

from layerprobe.core import BUILTIN_CORPUS, CorpusSpec, ModelSpec
from layerprobe.data import build_windows, iter_documents
from layerprobe.measure import distance as distance_module
from layerprobe.measure.angular import measure
from layerprobe.measure.distance import AngularAccumulator, angular_distance
from layerprobe.model import load_model
from layerprobe.model.stack import find_layers


def test_angular_distance_known_angles():
    a = torch.tensor([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0], [2.0, 2.0]])
    b = torch.tensor([[3.0, 0.0], [0.0, 5.0], [-1.0, 0.0], [1.0, 0.0]])
    assert angular_distance(a, b).tolist() == pytest.approx([0.0, 0.5, 1.0, 0.25], abs=1e-6)


def test_angular_distance_survives_half_precision_overflow():
    # 300^2 * 64 overflows float16 (max 65504) if the norm were taken before upcasting.
    a = torch.full((64,), 300.0, dtype=torch.float16)
    assert angular_distance(a, a * 2).item() == pytest.approx(0.0, abs=1e-3)


def test_accumulator_counts_and_skips_nonfinite_per_pair():
    torch.manual_seed(0)
    states = [torch.randn(10, 8) for _ in range(3)]
    states[1][4, 2] = float("inf")
    states[2][7, 0] = float("nan")
    acc = AngularAccumulator(3)
    acc.update(states)
    assert acc.nonfinite == 2 and acc.count == 8
    # Pair (0, 2) loses only position 7, pair (0, 1) only position 4, pair (1, 2) both.
    assert acc.nonfinite_positions() == [[0, 1, 1], [1, 1, 2], [1, 2, 1]]
    per_position = pairwise_float64(states)
    for i, j in [(0, 1), (0, 2), (1, 2)]:
        column = per_position[:, i, j]
        assert acc.result()[i][j] == pytest.approx(column[np.isfinite(column)].mean(), abs=1e-6)
    assert all(acc.result()[i][i] == 0.0 for i in range(3))


def test_a_state_nonfinite_everywhere_leaves_the_other_entries_measured():
    torch.manual_seed(2)
    states = [torch.randn(12, 8) for _ in range(4)]
    states[3][:] = float("nan")
    acc = AngularAccumulator(4)
    acc.update(states, [4, 4, 4])
    got = np.array(acc.result())
    assert np.isnan(got[:, 3]).all() and np.isnan(got[3, :]).all()
    expected = pairwise_float64(states[:3]).mean(axis=0)
    np.fill_diagonal(expected, 0.0)
    assert np.allclose(got[:3, :3], expected, atol=1e-6)
    assert acc.nonfinite_positions()[0][3] == 12 and acc.nonfinite_positions()[0][1] == 0
    assert np.isfinite(np.array(acc.stderr())[:3, :3]).all()


@pytest.mark.parametrize("chunk_positions", [None, 3])
def test_stderr_matches_a_per_window_float64_computation(chunk_positions):
    torch.manual_seed(3)
    sizes = [5, 9, 3, 7, 1, 6, 8]
    states = [torch.randn(sum(sizes), 16) for _ in range(4)]
    for s in states[1:]:  # correlate the depths so that distances vary between windows
        s.mul_(0.3).add_(states[0])
    states[2][[4, 10, 11]] = float("nan")  # some pairs lose positions, window 0 and 1 unevenly
    # chunks that cut through windows must not change anything
    acc = AngularAccumulator(4, chunk_bytes=chunk_positions * 4 * 16 * 4) if chunk_positions else AngularAccumulator(4)
    acc.update([s[:14] for s in states], sizes[:2])  # two updates: windows never span updates
    acc.update([s[14:] for s in states], sizes[2:])
    mean, se = ratio_estimate(pairwise_float64(states), sizes)
    np.fill_diagonal(mean, 0.0)
    off = ~np.eye(4, dtype=bool)
    assert np.allclose(np.array(acc.result())[off], mean[off], atol=1e-6)
    assert np.allclose(np.array(acc.stderr())[off], se[off], rtol=1e-5, atol=1e-9)
    assert (se[off] > 0).all()
    paired = row_difference_reference(pairwise_float64(states), sizes, np.array(acc.result()))
    got = np.array(acc.row_difference_stderr())
    assert np.allclose(got, paired, rtol=1e-5, atol=1e-9, equal_nan=True)


def test_stderr_of_single_positions_is_the_sample_stderr():
    """With one position per window (positions=last), SE = sample std (ddof=1) / √K of the values."""
    torch.manual_seed(4)
    states = [torch.randn(20, 8) for _ in range(2)]
    acc = AngularAccumulator(2)
    acc.update(states, [1] * 20)
    values = pairwise_float64(states)[:, 0, 1]
    assert acc.stderr()[0][1] == pytest.approx(values.std(ddof=1) / math.sqrt(20), rel=1e-5)
    one = AngularAccumulator(2)
    one.update(states)  # a single window: no spread to estimate from
    assert math.isnan(one.stderr()[0][1]) and not math.isnan(one.result()[0][1])


def test_accumulator_chunks_like_one_pass():
    torch.manual_seed(1)
    states = [torch.randn(50, 16) for _ in range(4)]
    whole = AngularAccumulator(4)
    whole.update(states)
    chunked = AngularAccumulator(4, chunk_bytes=7 * 4 * 16 * 4)  # 7 positions of 4 states × 16 floats
    chunked.update(states)
    assert torch.allclose(torch.tensor(whole.result()), torch.tensor(chunked.result()), atol=1e-12)


def test_angular_gathers_at_most_the_bound(tiny_checkpoints, monkeypatch):
    """Each slice of states the accumulator upcasts onto its device stays within max_state_bytes."""
    loaded = load_model(ModelSpec(str(tiny_checkpoints["llama"]), device="cpu", dtype="float32"), purpose="base")
    stack = find_layers(loaded.model)
    spec = CorpusSpec(BUILTIN_CORPUS, None, "train", "text", 512, 64)
    windows = build_windows(loaded.tokenizer, iter_documents(spec), spec.tokens, spec.seq_len)
    hidden = loaded.model.config.hidden_size
    bound = 10 * (stack.num_layers + 1) * hidden * 4  # ten positions at every depth, in fp32
    free = measure(loaded, stack, windows, "all", 4)
    slices: list[int] = []
    distances = distance_module._distances

    def watched(unit):
        slices.append(unit.shape[0])
        return distances(unit)

    monkeypatch.setattr(distance_module, "_distances", watched)
    bounded = measure(loaded, stack, windows, "all", 4, max_state_bytes=bound)
    assert max(slices) == 10 and sum(slices) == bounded.count == 512
    torch.testing.assert_close(torch.tensor(bounded.result()), torch.tensor(free.result()), atol=1e-6, rtol=0)
    # the standard errors treat each window as one sample however it is sliced
    torch.testing.assert_close(torch.tensor(bounded.stderr()), torch.tensor(free.stderr()), atol=1e-6, rtol=0)
