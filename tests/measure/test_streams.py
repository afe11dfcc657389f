"""Stacks whose blocks do not pass one stream each run (issue 25), measured against float64 hooks in the test.

Gemma-3n: its AltUp blocks pass 2 streams per position; the active one (`altup_active_idx`) is measured.
mllama: its cross-attention block 2 runs only with an image; a text-only pass skips it, so pairs starting
at its input are unmeasured and every other pair is the distance across the blocks that ran.
"""

from __future__ import annotations

import math

import pytest
import torch
import transformers as tf
from factories import angular_spec, depth_spec, depth_windows
from factories.towers import build_tower_checkpoint

from layerprobe.data import build_windows, iter_documents
from layerprobe.measure.angular import run_angular
from layerprobe.measure.depth import run_depth
from layerprobe.measure.distance import AngularAccumulator

TOKENS, SEQ = 96, 16


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("streams")
    built: dict[str, object] = {}

    def get(family: str):
        if family not in built:
            built[family] = build_tower_checkpoint(family, root / family)
        return built[family]

    return get


def _float64_states(path, family: str, windows, stream: int = 0) -> list[torch.Tensor]:
    """Per window, (L+1, positions, hidden) float64 block inputs and last output, read by the test's own hooks.

    Gemma-3n: `stream` of the (streams, batch, positions, hidden) states. mllama: block 2 never runs text-only,
    so its slot holds the state passed on past it (the input of block 3).
    """
    if family == "gemma3n":
        model = tf.Gemma3nForCausalLM.from_pretrained(path, dtype=torch.float64).eval()
        blocks = model.model.layers
    else:
        model = tf.MllamaForConditionalGeneration.from_pretrained(path, dtype=torch.float64).eval()
        blocks = model.model.language_model.layers
    inputs: dict[int, torch.Tensor] = {}
    out: list[torch.Tensor] = []
    hooks = [
        block.register_forward_pre_hook(
            lambda _m, a, k, i=i: inputs.__setitem__(i, a[0] if a else k["hidden_states"]), with_kwargs=True
        )
        for i, block in enumerate(blocks)
    ]
    hooks.append(blocks[-1].register_forward_hook(lambda _m, _a, o: out.append(o[0] if isinstance(o, tuple) else o)))
    result = []
    with torch.no_grad():
        for window in windows:
            inputs.clear()
            out.clear()
            model(input_ids=torch.tensor([window.input_ids]), use_cache=False)
            if family == "gemma3n":
                xs = [inputs[i][stream, 0] for i in range(len(blocks))] + [out[0][stream, 0]]  # batch row 0
            else:
                assert sorted(inputs) == [0, 1, 3] and len(out) == 1  # block 2 never ran
                inputs[2] = inputs[3]  # the state passed on past it
                xs = [inputs[i][0] for i in range(len(blocks))] + [out[0][0]]
            result.append(torch.stack(xs))
    for hook in hooks:
        hook.remove()
    return result


def _distances(states: list[torch.Tensor]) -> torch.Tensor:
    """Mean arccos(cos)/π over every position of every window, (L+1, L+1), float64."""
    x = torch.cat(states, dim=1)  # (L+1, positions, hidden)
    unit = x / x.norm(dim=-1, keepdim=True)
    cos = torch.einsum("iph,jph->pij", unit, unit).clamp(-1, 1)
    return (torch.arccos(cos) / math.pi).mean(0)


def _windows(path, tokens=TOKENS, seq=SEQ):
    spec = angular_spec(path, tokens=tokens, seq_len=seq, batch_size=2)
    tokenizer = tf.AutoTokenizer.from_pretrained(path)
    return spec, build_windows(tokenizer, iter_documents(spec.corpus), tokens, seq)


@pytest.mark.slow
def test_gemma3n_angular_is_the_active_altup_stream_of_float64_hooks(checkpoints):
    path = checkpoints("gemma3n")
    spec, windows = _windows(path)
    result = run_angular(spec)
    assert result.model.stream is not None and result.model.stream.startswith("AltUp stream 0 of 2")
    states = _float64_states(path, "gemma3n", windows)
    expected = _distances(states)
    got = torch.tensor(result.distance, dtype=torch.float64)
    assert torch.allclose(got, expected.fill_diagonal_(0), atol=2e-6), (got - expected).abs().max()
    assert result.nonfinite_tokens == 0 and result.data["positions_averaged"] == TOKENS
    # The choice matters: stream 1 gives other distances.
    other = _distances(_float64_states(path, "gemma3n", windows, stream=1))
    assert (other - expected).abs().max() > 1e-2


@pytest.mark.slow
def test_mllama_angular_skips_the_image_only_block_and_matches_float64_hooks(checkpoints):
    path = checkpoints("mllama")
    spec, windows = _windows(path)
    result = run_angular(spec)
    assert result.model.skipped_blocks == [2] and result.model.stack_role == "text"
    expected = _distances(_float64_states(path, "mllama", windows))
    got = torch.tensor(result.distance, dtype=torch.float64)
    for i in range(5):
        for j in range(5):
            if i != j and min(i, j) == 2:  # starting at the skipped block's input: unmeasured
                assert math.isnan(got[i, j]), (i, j)
            elif i != j:
                assert abs(got[i, j] - expected[i, j]) < 2e-6, (i, j, got[i, j], expected[i, j])
    # Block 1's output is block 3's input: d(x^1, x^2) is the distance across block 1, and equals d(x^1, x^3).
    assert got[1, 2] == pytest.approx(float(expected[1, 3]), abs=2e-6)
    assert result.nonfinite_tokens == 0 and result.data["positions_averaged"] == TOKENS
    assert all(n == 0 for row in result.nonfinite_positions for n in row)
    summary = result.summarize()
    assert [choice["layer"] for choice in summary["most_redundant"].values()] and all(
        choice["layer"] != 2 for choice in summary["most_redundant"].values()
    )


@pytest.mark.slow
def test_depth_measures_the_active_stream_and_leaves_the_skipped_block_unmeasured(checkpoints):
    for family in ("gemma3n", "mllama"):
        path = checkpoints(family)
        result = run_depth(depth_spec(path))
        states = _float64_states(path, family, depth_windows(path))
        x = torch.cat(states, dim=1)  # (L+1, positions, hidden)
        rms = x.pow(2).mean(-1).sqrt().mean(-1)
        update = [((x[l + 1] - x[l]).norm(dim=-1) / x[l].norm(dim=-1)).mean() for l in range(len(x) - 1)]
        for l in range(len(x)):
            if family == "mllama" and l == 2:
                assert math.isnan(result.rms.mean[2]) and math.isnan(result.update.mean[2])
                assert result.placement.blocks[2].reason and "only with an image" in result.placement.blocks[2].reason
                continue
            assert result.rms.mean[l] == pytest.approx(float(rms[l]), rel=1e-5), (family, l)
            if l < len(x) - 1:
                assert result.update.mean[l] == pytest.approx(float(update[l]), rel=1e-4), (family, l)


def test_an_absent_state_leaves_only_the_pairs_starting_there_unmeasured():
    """Direct arccos(cos)/π of random states; pairs (2, j) unmeasured, no position counted non-finite."""
    generator = torch.Generator().manual_seed(0)
    states = [torch.randn(12, 8, generator=generator, dtype=torch.float64) for _ in range(5)]
    states[2] = states[3]  # what capture_block_states puts at a skipped block's place
    accumulator = AngularAccumulator(5, absent=[2])
    accumulator.update([s.float() for s in states], [6, 6])
    got = torch.tensor(accumulator.result(), dtype=torch.float64)
    expected = _distances([torch.stack(states)])
    for i in range(5):
        for j in range(5):
            if min(i, j) == 2:
                assert math.isnan(got[i, j]), (i, j)
            elif i != j:
                assert abs(got[i, j] - expected[i, j]) < 1e-6
    assert accumulator.nonfinite == 0 and accumulator.count == 12
    assert all(n == 0 for row in accumulator.nonfinite_positions() for n in row)
