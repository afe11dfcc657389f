import math

import numpy as np
import pytest
import torch
from reference import float64_base_model, reference_distances

from layerprobe.core import BUILTIN_CORPUS, AngularSpec, CorpusSpec, ModelSpec
from layerprobe.data import build_windows, iter_documents
from layerprobe.measure.angular import run_angular
from layerprobe.measure.distance import AngularAccumulator, angular_distance

ARCHS = ["llama", "qwen3", "deepseek_v3", "gpt2", "bert"]


def test_angular_distance_known_angles():
    a = torch.tensor([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0], [2.0, 2.0]])
    b = torch.tensor([[3.0, 0.0], [0.0, 5.0], [-1.0, 0.0], [1.0, 0.0]])
    assert angular_distance(a, b).tolist() == pytest.approx([0.0, 0.5, 1.0, 0.25], abs=1e-6)


def test_angular_distance_survives_half_precision_overflow():
    # 300^2 * 64 overflows float16 (max 65504) if the norm were taken before upcasting.
    a = torch.full((64,), 300.0, dtype=torch.float16)
    assert angular_distance(a, a * 2).item() == pytest.approx(0.0, abs=1e-3)


def pairwise_float64(states) -> np.ndarray:
    """d(x^i, x^j) of every position in float64 numpy: (positions, S, S); NaN where x^i or x^j is non-finite."""
    x = np.stack([s.double().numpy() for s in states], axis=1)  # (positions, S, hidden)
    with np.errstate(invalid="ignore"):
        unit = x / np.linalg.norm(x, axis=-1, keepdims=True)
        cos = np.clip(np.einsum("pih,pjh->pij", unit, unit), -1.0, 1.0)
    return np.arccos(cos) / math.pi


def ratio_estimate(per_position: np.ndarray, sizes) -> tuple[np.ndarray, np.ndarray]:
    """Mean over finite positions and its window-level standard error, written out per window in float64.

    Window w has mean m_w over its n_w finite positions; the estimate is Σ n_w m_w / Σ n_w and
    SE² = K/(K−1) Σ_w n_w² (m_w − mean)² / (Σ n_w)² over the K windows with n_w > 0.
    """
    bounds = np.cumsum([0, *sizes])
    means, counts = [], []
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):
        window = per_position[a:b]
        finite = np.isfinite(window)
        n = finite.sum(axis=0)
        counts.append(n)
        means.append(np.where(n > 0, np.where(finite, window, 0.0).sum(axis=0) / np.maximum(n, 1), np.nan))
    means, counts = np.array(means), np.array(counts, dtype=float)
    total = counts.sum(axis=0)
    mean = np.nansum(means * counts, axis=0) / total
    k = (counts > 0).sum(axis=0)
    spread = np.nansum(counts**2 * (means - mean) ** 2, axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        se = np.where(k >= 2, np.sqrt(k / (k - 1) * spread) / total, np.nan)
    return mean, se


def row_difference_reference(per_position: np.ndarray, sizes, mean: np.ndarray) -> np.ndarray:
    """Stderr of each cell minus its span row's minimum, from per-window residuals in float64.

    Window w's contribution to cell a's ratio estimate is u_a,w = (S_a,w − d_a n_a,w) / N_a; the difference of
    two cells has SE² = K/(K−1) Σ_w (u_a,w − u_b,w)².
    """
    bounds = np.cumsum([0, *sizes])
    sums = np.array([np.nansum(per_position[a:b], axis=0) for a, b in zip(bounds[:-1], bounds[1:], strict=True)])
    counts = np.array(
        [np.isfinite(per_position[a:b]).sum(axis=0) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    )
    total = counts.sum(axis=0)
    return paired_from_residuals((sums - sums.sum(axis=0) / total * counts) / total, mean)


def paired_from_residuals(u: np.ndarray, mean: np.ndarray) -> np.ndarray:
    """u: (windows, S, S) each window's share of each cell's error; SE of each cell minus its row minimum."""
    size, k = mean.shape[0], u.shape[0]
    out = np.full((size, size), np.nan)
    np.fill_diagonal(out, 0.0)
    for span in range(1, size):
        starts = [l for l in range(size - span) if np.isfinite(mean[l, l + span])]
        best = min(starts, key=lambda l: (mean[l, l + span], l))
        for l in starts:
            diff = u[:, l, l + span] - u[:, best, best + span]
            out[l, l + span] = out[l + span, l] = math.sqrt(k / (k - 1) * (diff**2).sum())
    return out


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


def _spec(path, tokens=700, seq_len=96, positions="all", batch_size=3):
    return AngularSpec(
        ModelSpec(str(path), device="cpu"),
        CorpusSpec(BUILTIN_CORPUS, None, "train", "text", tokens, seq_len),
        positions=positions,
        batch_size=batch_size,
    )


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("positions", ["all", "last"])
def test_matrix_matches_float64_hidden_states(tiny_checkpoints, arch, positions):
    path = tiny_checkpoints[arch]
    spec = _spec(path, positions=positions)
    result = run_angular(spec)
    L = result.model.num_layers
    assert L == 4 and len(result.distance) == L + 1
    reference_model = float64_base_model(path, arch)
    import transformers as tf

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
    import transformers as tf

    path = tiny_checkpoints[arch]
    spec = _spec(path, tokens=300)
    result = run_angular(spec)
    tokenizer = tf.AutoTokenizer.from_pretrained(path)
    windows = build_windows(tokenizer, iter_documents(spec.corpus), 300, 96)
    with_norm = tf.AutoModel.from_pretrained(path, dtype=torch.float64).eval()
    naive = reference_distances(with_norm, windows)
    L = result.model.num_layers
    assert abs(naive[0][L].item() - result.distance[0][L]) > 1e-3


def test_real_minilm_matches_float64(minilm):
    import transformers as tf

    spec = _spec(minilm, tokens=1500, seq_len=256, batch_size=2)
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
    result = run_angular(_spec(tiny_checkpoints["qwen3"], tokens=200))
    d = result.distance
    assert all(d[i][i] == 0.0 for i in range(len(d)))
    assert all(d[i][j] == d[j][i] for i in range(len(d)) for j in range(len(d)))
    assert all(0 < d[i][j] <= 1 for i in range(len(d)) for j in range(len(d)) if i != j)
    assert not any(math.isnan(v) for row in d for v in row)


def test_batch_size_does_not_change_the_result(tiny_checkpoints):
    one = run_angular(_spec(tiny_checkpoints["llama"], tokens=500, batch_size=1))
    many = run_angular(_spec(tiny_checkpoints["llama"], tokens=500, batch_size=8))
    assert torch.allclose(torch.tensor(one.distance), torch.tensor(many.distance), atol=1e-6)


def test_roberta_positions_offset_caps_the_window(minilm, tmp_path):
    """RoBERTa's position ids start at pad_token_id + 1: only max_position_embeddings - 2 positions exist."""
    import transformers as tf

    tokenizer = tf.AutoTokenizer.from_pretrained(minilm)
    config = tf.RobertaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=3,
        num_attention_heads=4,
        max_position_embeddings=42,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(0)
    tf.RobertaModel(config).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    spec = _spec(tmp_path, tokens=200, seq_len=1024)
    result = run_angular(spec)
    assert result.data["seq_len"] == 42 - (tokenizer.pad_token_id + 1)
    windows = build_windows(tokenizer, iter_documents(spec.corpus), 200, result.data["seq_len"])
    reference = reference_distances(float64_base_model(tmp_path, "bert"), windows)
    assert torch.allclose(torch.tensor(result.distance, dtype=torch.float64), reference, atol=2e-6)


def test_a_nonfinite_block_output_spoils_only_its_own_pairs(tiny_checkpoints):
    """The last block's output is inf at some positions: entries (i, L) lose them, every other entry stays."""
    import transformers as tf

    from layerprobe.model.load import load_model
    from layerprobe.model.stack import find_layers

    path = tiny_checkpoints["llama"]
    spec = _spec(path, tokens=400)
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


@pytest.fixture
def one_torch_thread():
    """A tiny model gains nothing from threads, and on a busy 2-core box idle OpenMP spinning costs 10×."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("positions", ["all", "last"])
def test_stderr_is_calibrated_on_two_disjoint_halves(tmp_path, positions, one_torch_thread):
    """Two disjoint halves of one corpus are two samples: their entries must differ by < 3 combined stderrs.

    The halves are random halves of the windows (three fixed splits): the stderr is the sampling error of
    windows drawn from the corpus, not a shift between two different corpora (the first and second half
    of the pydoc topics are different subjects, and do differ by more).
    """
    from factories import build_checkpoint

    from layerprobe.measure.angular import measure
    from layerprobe.model.load import load_model
    from layerprobe.model.stack import find_layers

    spec = _spec(build_checkpoint("llama", tmp_path / "llama8", num_layers=8), tokens=6000)
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
