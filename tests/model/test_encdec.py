"""Encoder-decoders (T5, BART): each stack measured on its own, numbers checked against float64 references.

The references run the model's own forward (with its own decoder inputs and its own logits) in float64,
recording block outputs with plain forward hooks, or with a block physically deleted from a copy.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch
from factories import ENCDEC_DEPTHS, ENCDEC_FAMILIES, angular_spec, build_encdec_checkpoint, small_encdec

from layerprobe.core import BUILTIN_CORPUS, CorpusSpec, UnsupportedModel
from layerprobe.data import windows_before_loading
from layerprobe.evaluate.corpus_metric import CorpusScorer
from layerprobe.measure.angular import run_angular
from layerprobe.model import SEQ2SEQ, find_layers, load_model, model_kind, removed_blocks
from layerprobe.model.encdec import shift_right, teacher_forced

PATHS = {"t5": ("encoder.block", "decoder.block"), "bart": ("encoder.layers", "decoder.layers")}
HEAD_PATHS = {"t5": ("encoder.block", "decoder.block"), "bart": ("model.encoder.layers", "model.decoder.layers")}


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("encdec")
    return {family: build_encdec_checkpoint(family, root / family) for family in ENCDEC_FAMILIES}


def reference_states(model, ids: torch.Tensor, side: str) -> list[torch.Tensor]:
    """x^0 … x^L of one side in float64: the model's own forward, block inputs/outputs seen by plain hooks."""
    blocks = dict(zip(("encoder", "decoder"), PATHS[model.config.model_type], strict=True))[side]
    stack = (model.model if model.config.model_type == "bart" else model).get_submodule(blocks)
    states: list[torch.Tensor] = []
    handles = [stack[0].register_forward_pre_hook(lambda _m, args: states.append(args[0]))]
    handles += [b.register_forward_hook(lambda _m, _a, out: states.append(_hidden(out))) for b in stack]
    try:
        with torch.no_grad():
            model(input_ids=ids, decoder_input_ids=shift_right(ids, model.config.decoder_start_token_id))
    finally:
        for handle in handles:
            handle.remove()
    return states


def _hidden(output) -> torch.Tensor:
    """A block's hidden states: BART's layers return the tensor, T5's a tuple led by it."""
    return output if isinstance(output, torch.Tensor) else output[0]


def angular(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    cos = torch.nn.functional.cosine_similarity(a, b, dim=-1).clamp(-1, 1)
    return torch.arccos(cos) / math.pi


@pytest.mark.slow
@pytest.mark.parametrize("family", ENCDEC_FAMILIES)
@pytest.mark.parametrize("side", ["encoder", "decoder"])
def test_angular_of_each_stack_matches_a_float64_reference(checkpoints, family, side):
    path = dict(zip(("encoder", "decoder"), HEAD_PATHS[family], strict=True))[side]
    spec = angular_spec(checkpoints[family], tokens=300, seq_len=48)
    spec = type(spec)(**{**vars(spec), "model": type(spec.model)(**{**vars(spec.model), "layers_path": path})})
    result = run_angular(spec)
    assert result.model.side == side and result.model.num_layers == ENCDEC_DEPTHS[side]
    assert result.model.layer_path == PATHS[family][0 if side == "encoder" else 1]
    _, windows, _ = windows_before_loading(spec.model, spec.corpus)
    model = small_encdec(family).double()
    sums = torch.zeros(ENCDEC_DEPTHS[side] + 1, ENCDEC_DEPTHS[side] + 1, dtype=torch.float64)
    count = 0
    for window in windows:
        states = [s[0] for s in reference_states(model, torch.tensor([window.input_ids]), side)]
        for i in range(len(states)):
            for j in range(len(states)):
                sums[i, j] += angular(states[i], states[j]).sum()
        count += len(window.input_ids)
    expected = (sums / count).tolist()
    for i, row in enumerate(expected):
        for j, value in enumerate(row):
            assert result.distance[i][j] == pytest.approx(value, abs=2e-6)


@pytest.mark.parametrize("family", ENCDEC_FAMILIES)
def test_the_decoder_is_the_default_stack_and_a_wrong_path_names_both(family):
    model = teacher_forced(small_encdec(family))
    assert find_layers(model, None).path == PATHS[family][1]
    for written, found in zip(HEAD_PATHS[family], PATHS[family], strict=True):
        assert find_layers(model, written).path == found
        assert find_layers(model, found).path == found
    with pytest.raises(UnsupportedModel) as caught:
        find_layers(model, "encoder")
    hinted = caught.value.hint.split("--layers-path ")[1:]  # every path the hint offers works
    assert [find_layers(model, p.split()[0]).path for p in hinted] == list(PATHS[family])


@pytest.mark.parametrize("family", ENCDEC_FAMILIES)
def test_the_head_gives_the_models_own_logits(family):
    model = small_encdec(family).double()
    ids = torch.randint(3, 500, (2, 9), generator=torch.Generator().manual_seed(0))
    wrapped = teacher_forced(model)
    with torch.no_grad():
        got = wrapped.get_output_embeddings()(wrapped(ids).last_hidden_state)
        torch.testing.assert_close(got, wrapped.logits(ids), atol=1e-10, rtol=0)


def reference_nll(model, ids: torch.Tensor) -> torch.Tensor:
    """Per-window mean −log P(window token t), the decoder teacher-forced, from the model's own logits."""
    decoder_ids = torch.cat([torch.full_like(ids[:, :1], model.config.decoder_start_token_id), ids[:, :-1]], 1)
    with torch.no_grad():
        logits = model(input_ids=ids, decoder_input_ids=decoder_ids).logits
    return torch.nn.functional.cross_entropy(logits.transpose(1, 2), ids, reduction="none").mean(1)


def deleted(model, family: str, side: str, index: int):
    """A float64 copy of `model` with block `index` of `side` physically deleted (its config count lowered)."""
    copied = copy.deepcopy(model)
    blocks = (copied.model if family == "bart" else copied).get_submodule(
        dict(zip(("encoder", "decoder"), PATHS[family], strict=True))[side]
    )
    del blocks[index]
    return copied


@pytest.mark.slow
@pytest.mark.parametrize(
    ("family", "side", "index"),
    [("t5", "encoder", 1), ("t5", "decoder", 2), ("bart", "encoder", 0), ("bart", "decoder", 1)],
)
def test_corpus_metric_of_a_removed_block_matches_a_float64_deleted_block(checkpoints, family, side, index):
    path = dict(zip(("encoder", "decoder"), PATHS[family], strict=True))[side]
    spec = angular_spec(checkpoints[family], tokens=200, seq_len=40)
    model_spec = type(spec.model)(**{**vars(spec.model), "layers_path": path, "dtype": "float32"})
    corpus = CorpusSpec(BUILTIN_CORPUS, None, "train", "text", 200, 40)
    loaded = load_model(model_spec, purpose="head")
    assert loaded.kind == SEQ2SEQ
    stack = find_layers(loaded.model, path)
    scorer = CorpusScorer(loaded, stack, corpus, [index], batch_size=2)
    with scorer.variant(index):
        evaluation = scorer.score()
    with scorer.variant(None):
        baseline = scorer.score()
    assert scorer.engine == "simple"
    reference = small_encdec(family).double()
    pruned = deleted(reference, family, side, index)
    ids = torch.tensor([w.input_ids for w in scorer.windows])
    assert baseline.metrics["nll"].value == pytest.approx(float(reference_nll(reference, ids).mean()), abs=1e-5)
    assert evaluation.metrics["nll"].value == pytest.approx(float(reference_nll(pruned, ids).mean()), abs=1e-5)


def test_t5_without_block_0_keeps_its_position_bias():
    """T5's block 0 owns the relative position bias: removing it hands the bias on (as an exported T5 holds)."""
    model = small_encdec("t5").double()
    wrapped = teacher_forced(model)
    ids = torch.randint(3, 500, (1, 12), generator=torch.Generator().manual_seed(1))
    stack = find_layers(wrapped, "encoder.block")
    bias = stack.blocks[0].layer[0].SelfAttention.relative_attention_bias
    with torch.no_grad(), removed_blocks(stack, [0]) as shrunk:
        attention = shrunk.blocks[0].layer[0].SelfAttention
        assert attention.has_relative_attention_bias and attention.relative_attention_bias is bias
        inside = wrapped.logits(ids)
    assert not stack.blocks[1].layer[0].SelfAttention.has_relative_attention_bias  # put back
    assert not hasattr(stack.blocks[1].layer[0].SelfAttention, "relative_attention_bias")
    # Reference: a T5 whose encoder has only block 1, its self-attention given block 0's bias module.
    copied = copy.deepcopy(model)
    copied.encoder.block[1].layer[0].SelfAttention.relative_attention_bias = (
        copied.encoder.block[0].layer[0].SelfAttention.relative_attention_bias
    )
    copied.encoder.block[1].layer[0].SelfAttention.has_relative_attention_bias = True
    del copied.encoder.block[0]
    with torch.no_grad():
        expected = copied(input_ids=ids, decoder_input_ids=shift_right(ids, 0)).logits
    torch.testing.assert_close(inside, expected, atol=1e-10, rtol=0)


def test_whisper_is_refused_in_one_line_from_its_config():
    import transformers as tf

    with pytest.raises(UnsupportedModel) as caught:
        model_kind(tf.WhisperConfig())
    assert "audio features" in caught.value.message and "\n" not in caught.value.message
    assert caught.value.hint is None
