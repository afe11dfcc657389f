import math

import pytest
import torch
from reference import float64_base_model, reference_distances

from layerprobe.angular import AngularAccumulator, angular_distance, run_angular
from layerprobe.corpus import build_windows, iter_documents
from layerprobe.specs import BUILTIN_CORPUS, AngularSpec, CorpusSpec, ModelSpec

ARCHS = ["llama", "qwen3", "deepseek_v3", "gpt2", "bert"]


def test_angular_distance_known_angles():
    a = torch.tensor([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0], [2.0, 2.0]])
    b = torch.tensor([[3.0, 0.0], [0.0, 5.0], [-1.0, 0.0], [1.0, 0.0]])
    assert angular_distance(a, b).tolist() == pytest.approx([0.0, 0.5, 1.0, 0.25], abs=1e-6)


def test_angular_distance_survives_half_precision_overflow():
    # 300^2 * 64 overflows float16 (max 65504) if the norm were taken before upcasting.
    a = torch.full((64,), 300.0, dtype=torch.float16)
    assert angular_distance(a, a * 2).item() == pytest.approx(0.0, abs=1e-3)


def test_accumulator_counts_and_skips_nonfinite_positions():
    torch.manual_seed(0)
    states = [torch.randn(10, 8) for _ in range(3)]
    states[1][4, 2] = float("inf")
    states[2][7, 0] = float("nan")
    acc = AngularAccumulator(3)
    acc.update(states)
    assert acc.nonfinite == 2 and acc.count == 8
    keep = [i for i in range(10) if i not in (4, 7)]
    expected = angular_distance(states[0][keep], states[2][keep]).double().mean().item()
    assert acc.result()[0][2] == pytest.approx(expected, abs=1e-6)


def test_accumulator_chunks_like_one_pass(monkeypatch):
    import layerprobe.angular as angular

    torch.manual_seed(1)
    states = [torch.randn(50, 16) for _ in range(4)]
    whole = AngularAccumulator(4)
    whole.update(states)
    monkeypatch.setattr(angular, "_CHUNK_BYTES", 7 * 4 * 16 * 4)  # 7 positions of 4 states × 16 floats
    chunked = AngularAccumulator(4)
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
