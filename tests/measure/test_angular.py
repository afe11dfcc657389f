"""`run_angular`: the distance matrix of every tiny architecture against float64 `output_hidden_states`.

The last state is taken before the final norm; batches, positions and spread models change nothing they
should not; the standard errors are calibrated on disjoint halves of one corpus.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import transformers as tf
from command_line import invoke
from factories import TINY_ARCHITECTURES, angular_spec, build_checkpoint, build_roberta, offload_args
from reference import float64_base_model, paired_from_residuals, pairwise_float64, ratio_estimate, reference_distances

from layerprobe.core import BUILTIN_CORPUS
from layerprobe.data import build_windows, iter_documents
from layerprobe.measure.angular import measure, run_angular
from layerprobe.model.load import load_model
from layerprobe.model.stack import find_layers
from layerprobe.results import load_result


@pytest.mark.parametrize("arch", TINY_ARCHITECTURES)
@pytest.mark.parametrize("positions", ["all", "last"])
def test_matrix_matches_float64_hidden_states(tiny_checkpoints, arch, positions):
    path = tiny_checkpoints[arch]
    spec = angular_spec(path, positions=positions)
    result = run_angular(spec)
    L = result.model.num_layers
    assert L == 4 and len(result.distance) == L + 1
    reference_model = float64_base_model(path, arch)
    tokenizer = tf.AutoTokenizer.from_pretrained(path)
    windows = build_windows(tokenizer, iter_documents(spec.corpus), spec.corpus.tokens, spec.corpus.seq_len)
    expected = reference_distances(reference_model, windows, positions)
    got = torch.tensor(result.distance, dtype=torch.float64)
    assert torch.allclose(got, expected, atol=2e-6), (got - expected).abs().max()
    # The stderr: each window's float64 mean is one sample, weighted by its positions.
    per_window = np.stack([reference_distances(reference_model, [w], positions).numpy() for w in windows])
    weights = np.array([len(w.input_ids) if positions == "all" else 1 for w in windows], dtype=float)
    mean = (weights[:, None, None] * per_window).sum(0) / weights.sum()
    k = len(windows)
    se = np.sqrt(k / (k - 1) * (weights[:, None, None] ** 2 * (per_window - mean) ** 2).sum(0)) / weights.sum()
    off = ~np.eye(L + 1, dtype=bool)
    assert np.allclose(np.array(result.distance_stderr)[off], se[off], rtol=1e-3, atol=1e-7)
    u = weights[:, None, None] * (per_window - mean) / weights.sum()
    paired = paired_from_residuals(u, np.array(result.distance))
    assert np.allclose(np.array(result.row_difference_stderr), paired, rtol=1e-3, atol=1e-7)
    assert result.nonfinite_positions == [[0] * (L + 1) for _ in range(L + 1)]
    assert result.data["tokens"] == 700
    assert result.data["positions_averaged"] == (700 if positions == "all" else len(windows))
    assert result.nonfinite_tokens == 0


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_last_state_is_taken_before_the_final_norm(tiny_checkpoints, arch):
    """The pitfall: output_hidden_states[-1] of decoders comes after the final norm."""
    path = tiny_checkpoints[arch]
    spec = angular_spec(path, tokens=300)
    result = run_angular(spec)
    tokenizer = tf.AutoTokenizer.from_pretrained(path)
    windows = build_windows(tokenizer, iter_documents(spec.corpus), 300, 96)
    with_norm = tf.AutoModel.from_pretrained(path, dtype=torch.float64).eval()
    naive = reference_distances(with_norm, windows)
    L = result.model.num_layers
    assert abs(naive[0][L].item() - result.distance[0][L]) > 1e-3


@pytest.mark.slow  # over 2.5 s on 2 cores: the default tier stays under 3 minutes
def test_real_minilm_matches_float64(minilm):
    spec = angular_spec(minilm, tokens=1500, seq_len=256, batch_size=2)
    result = run_angular(spec)
    assert result.model.num_layers == 6 and result.model.layer_path == "encoder.layer"
    tokenizer = tf.AutoTokenizer.from_pretrained(minilm)
    windows = build_windows(tokenizer, iter_documents(spec.corpus), 1500, 256)
    assert windows[0].input_ids[0] == tokenizer.cls_token_id and windows[0].input_ids[-1] == tokenizer.sep_token_id
    reference = reference_distances(float64_base_model(minilm, "bert"), windows)
    got = torch.tensor(result.distance, dtype=torch.float64)
    assert torch.allclose(got, reference, atol=2e-6)
    # A trained model is far from random: adjacent blocks are close, distant ones less so.
    assert all(0 < result.distance[l][l + 1] < result.distance[0][6] for l in range(6))


def test_matrix_is_symmetric_with_zero_diagonal(tiny_checkpoints):
    result = run_angular(angular_spec(tiny_checkpoints["qwen3"], tokens=200))
    d = result.distance
    assert all(d[i][i] == 0.0 for i in range(len(d)))
    assert all(d[i][j] == d[j][i] for i in range(len(d)) for j in range(len(d)))
    assert all(0 < d[i][j] <= 1 for i in range(len(d)) for j in range(len(d)) if i != j)
    assert not any(math.isnan(v) for row in d for v in row)


def test_batch_size_does_not_change_the_result(tiny_checkpoints):
    one = run_angular(angular_spec(tiny_checkpoints["llama"], tokens=500, batch_size=1))
    many = run_angular(angular_spec(tiny_checkpoints["llama"], tokens=500, batch_size=8))
    assert torch.allclose(torch.tensor(one.distance), torch.tensor(many.distance), atol=1e-6)


def test_roberta_positions_offset_caps_the_window(minilm, tmp_path):
    """RoBERTa's position ids start at pad_token_id + 1: only max_position_embeddings - 2 positions exist."""
    tokenizer = tf.AutoTokenizer.from_pretrained(minilm)
    build_roberta(tmp_path, positions=42)
    spec = angular_spec(tmp_path, tokens=200, seq_len=1024)
    result = run_angular(spec)
    assert result.data["seq_len"] == 42 - (tokenizer.pad_token_id + 1)
    windows = build_windows(tokenizer, iter_documents(spec.corpus), 200, result.data["seq_len"])
    reference = reference_distances(float64_base_model(tmp_path, "bert"), windows)
    assert torch.allclose(torch.tensor(result.distance, dtype=torch.float64), reference, atol=2e-6)


def test_a_nonfinite_block_output_spoils_only_its_own_pairs(tiny_checkpoints):
    """The last block's output is inf at some positions: entries (i, L) lose them, every other entry stays."""
    path = tiny_checkpoints["llama"]
    spec = angular_spec(path, tokens=400)
    broken = {0: [3, 17], 2: [50]}  # window index → positions whose x^L is set to inf
    calls = []

    def spoil(module, args, output):
        hidden = output[0] if isinstance(output, tuple) else output
        for row in range(hidden.shape[0]):
            for position in broken.get(len(calls) * spec.batch_size + row, []):
                hidden[row, position] = float("inf")
        calls.append(1)
        return output

    loaded = load_model(spec.model)
    stack = find_layers(loaded.model)
    L = stack.num_layers
    handle = stack.blocks[L - 1].register_forward_hook(spoil)
    try:
        result = run_angular(spec, loaded=loaded)
    finally:
        handle.remove()
    tokenizer = tf.AutoTokenizer.from_pretrained(path)
    windows = build_windows(tokenizer, iter_documents(spec.corpus), 400, 96)
    model = float64_base_model(path, "llama")
    with torch.no_grad():
        states = [
            torch.stack(model(input_ids=torch.tensor([w.input_ids]), output_hidden_states=True).hidden_states)[:, 0]
            for w in windows
        ]  # each (L+1, T, hidden)
    for index, positions in broken.items():
        states[index][L, positions] = float("inf")
    per_position = pairwise_float64(list(torch.cat(states, dim=1)))
    sizes = [len(w.input_ids) for w in windows]
    expected, expected_se = ratio_estimate(per_position, sizes)
    np.fill_diagonal(expected, 0.0)
    got = np.array(result.distance)
    assert np.isfinite(got).all()
    assert np.allclose(got, expected, atol=2e-6)
    off = ~np.eye(L + 1, dtype=bool)
    assert np.allclose(np.array(result.distance_stderr)[off], expected_se[off], rtol=1e-3)
    lost = sum(len(p) for p in broken.values())
    assert result.nonfinite_tokens == lost
    assert result.data["positions_averaged"] == 400 - lost
    counts = np.array(result.nonfinite_positions)
    assert (counts[:L, L] == lost).all() and (counts[:L, :L] == 0).all() and counts[L, L] == lost


@pytest.mark.parametrize("positions", ["all", "last"])
def test_stderr_is_calibrated_on_two_disjoint_halves(tmp_path, positions):
    """Two disjoint halves of one corpus are two samples: their entries must differ by < 3 combined stderrs.

    The halves are random halves of the windows (three fixed splits): the stderr is the sampling error of
    windows drawn from the corpus, not a shift between two different corpora (the first and second half
    of the pydoc topics are different subjects, and do differ by more).
    """
    spec = angular_spec(build_checkpoint("llama", tmp_path / "llama8", num_layers=8), tokens=6000)
    seq_len = 48 if positions == "all" else 16
    loaded = load_model(spec.model)
    stack = find_layers(loaded.model)
    windows = build_windows(loaded.tokenizer, iter_documents(spec.corpus), spec.corpus.tokens, seq_len)
    upper = np.triu_indices(stack.num_layers + 1, k=1)
    z, z_paired = [], []
    for seed in range(3):
        order = np.random.default_rng(seed).permutation(len(windows))
        halves = [[windows[i] for i in sorted(part)] for part in np.array_split(order, 2)]
        first, second = (measure(loaded, stack, half, positions, 16) for half in halves)
        d1, d2 = np.array(first.result()), np.array(second.result())
        s1, s2 = np.array(first.stderr()), np.array(second.stderr())
        assert (s1[upper] > 0).all() and (s2[upper] > 0).all()
        z.append(np.abs(d1 - d2)[upper] / np.hypot(s1, s2)[upper])
        # The paired differences to the row minimum, where both halves pick the same minimum.
        p1, p2 = np.array(first.row_difference_stderr()), np.array(second.row_difference_stderr())
        for span in range(1, len(d1)):
            rows = [np.array([d[l, l + span] for l in range(len(d1) - span)]) for d in (d1, d2)]
            best = [int(np.argmin(row)) for row in rows]
            if best[0] != best[1] or len(rows[0]) < 2:
                continue
            others = [l for l in range(len(rows[0])) if l != best[0]]
            gap = [rows[k][others] - rows[k][best[0]] for k in (0, 1)]
            se = np.hypot(p1[others, [l + span for l in others]], p2[others, [l + span for l in others]])
            z_paired.extend(np.abs(gap[0] - gap[1]) / se)
    z, z_paired = np.concatenate(z), np.array(z_paired)
    assert len(z_paired) > 20 and (z_paired < 3).mean() >= 0.9, z_paired
    assert np.isfinite(z).all()
    assert (z < 3).mean() >= 0.9, z
    # Not uselessly wide either: |N(0, 1)| has median 0.67; a stderr 5× too wide would give ≈ 0.13.
    assert 0.2 < np.median(z) < 2.0, z


@pytest.mark.slow  # over 2.5 s on 2 cores: the default tier stays under 3 minutes
def test_angular_under_device_map_equals_one_device(tiny_checkpoints, tmp_path):
    common = ["--dataset", BUILTIN_CORPUS, "--tokens", "512", "--seq-len", "64", "--dtype", "float32", "--quiet"]
    model = str(tiny_checkpoints["llama"])
    plain = invoke("angular", model, "--device", "cpu", *common, "--out", tmp_path / "a")
    spread = invoke(
        "angular", model, "--device-map", "auto", "--model-args", offload_args(tmp_path), "--max-state-memory", "4KiB",
        *common, "--out", tmp_path / "b",
    )  # fmt: skip
    assert plain.exit_code == 0 and spread.exit_code == 0, plain.output + spread.output
    a, b = (load_result(tmp_path / d / "angular.json") for d in ("a", "b"))
    torch.testing.assert_close(torch.tensor(b.distance), torch.tensor(a.distance), atol=1e-5, rtol=0)
    assert b.run.device == "device_map=auto"
