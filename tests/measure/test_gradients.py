"""`depth --grad`: the gradient norms per block and sublayer equal autograd's on one batch of all windows;
masked-LM inputs are masked BERT-style and reproducibly."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import transformers as tf
from factories import DEPTH_SEQ, DEPTH_TOKENS, depth_spec, depth_windows, minilm_dir

from layerprobe.measure.depth import run_depth
from layerprobe.measure.gradients import MASK_FRACTION, mask_window


def _autograd_norms(path: Path, causal: bool, seed: int = 1234) -> tuple[list[float], dict, float]:
    """‖∇ mean loss‖ per block from ONE batch of all windows and PyTorch's own mean cross-entropy."""
    head = tf.AutoModelForCausalLM if causal else tf.AutoModelForMaskedLM
    model = head.from_pretrained(path).double().eval()
    tokenizer = tf.AutoTokenizer.from_pretrained(path)
    windows = depth_windows(path)
    ids = torch.tensor([w.input_ids for w in windows])
    if causal:
        logits = model(input_ids=ids).logits
        loss = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))
    else:
        pairs = [mask_window(w.input_ids, i, seed, tokenizer) for i, w in enumerate(windows)]
        inputs, labels = torch.tensor([p[0] for p in pairs]), torch.tensor([p[1] for p in pairs])
        logits = model(input_ids=inputs).logits
        loss = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100
        )
    loss.backward()
    blocks = model.base_model.layers if causal else model.base_model.encoder.layer
    per_block, subs = [], {"attention": [], "mlp": []}
    prefixes = (
        {"attention": ("self_attn.", "input_layernorm."), "mlp": ("mlp.", "post_attention_layernorm.")}
        if causal
        else {"attention": ("attention.self.", "attention.output.dense."), "mlp": ("intermediate.", "output.dense.")}
    )
    for block in blocks:
        named = dict(block.named_parameters())
        per_block.append(math.sqrt(sum(float(p.grad.pow(2).sum()) for p in named.values())))
        for kind, pre in prefixes.items():
            subs[kind].append(math.sqrt(sum(float(p.grad.pow(2).sum()) for n, p in named.items() if n.startswith(pre))))
    return per_block, subs, float(loss.detach())


@pytest.mark.parametrize(("arch", "causal"), [("llama", True), ("bert_mlm", False)])
def test_grad_norms_match_autograd_on_one_batch(three_block_checkpoints, arch, causal):
    result = run_depth(depth_spec(three_block_checkpoints[arch], batch_size=2, grad=True))
    block, subs, loss = _autograd_norms(three_block_checkpoints[arch], causal)
    grad = result.grad
    assert grad.loss == ("next-token" if causal else "masked-lm")
    assert grad.block == pytest.approx(block, rel=1e-4, abs=1e-12)
    for kind in ("attention", "mlp"):
        assert grad.sublayers[kind] == pytest.approx(subs[kind], rel=1e-4, abs=1e-12)
    assert grad.mean_loss == pytest.approx(loss, rel=1e-5)
    windows = DEPTH_TOKENS // DEPTH_SEQ
    if causal:
        assert grad.positions == windows * (DEPTH_SEQ - 1)
    again = run_depth(depth_spec(three_block_checkpoints[arch], batch_size=5, grad=True)).grad
    assert again.block == pytest.approx(grad.block, rel=1e-5, abs=1e-12)  # the mean-loss gradient ignores batching


def test_masking_is_bert_style_and_reproducible():
    tokenizer = tf.AutoTokenizer.from_pretrained(minilm_dir())
    ids = tokenizer("the quick brown fox jumps over the lazy dog " * 8)["input_ids"]
    inputs, labels = mask_window(ids, 3, 1234, tokenizer)
    assert (inputs, labels) == mask_window(ids, 3, 1234, tokenizer)
    assert mask_window(ids, 4, 1234, tokenizer) != (inputs, labels)
    chosen = [i for i, t in enumerate(labels) if t != -100]
    assert len(chosen) == round(MASK_FRACTION * (len(ids) - 2))
    assert 0 not in chosen and len(ids) - 1 not in chosen  # [CLS] and [SEP] are never predicted
    assert all(labels[i] == ids[i] for i in chosen)
    assert sum(inputs[i] == tokenizer.mask_token_id for i in chosen) >= len(chosen) // 2
