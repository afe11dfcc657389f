"""`run_angular` on Gemma-4 with KV sharing on, against float64 block outputs taken in the test.

The last block reuses block 1's keys and values (`num_kv_shared_layers=1`); the reference runs the model in
float64 with plain forward hooks on its blocks (the input of block 0, the output of every block) and takes
the mean arccos(cos)/π over every position of every window.
"""

from __future__ import annotations

import math

import pytest
import torch
import transformers as tf
from factories import angular_spec, byte_level_tokenizer, kv_sharing_config, randomize_norms

from layerprobe.data import build_windows, iter_documents
from layerprobe.measure.angular import run_angular

F, S = "full_attention", "sliding_attention"


def _block_states(model, ids: torch.Tensor) -> torch.Tensor:
    """(L+1, T, H): the input of block 0 and each block's output, from hooks on `model.model.layers`."""
    blocks = model.model.layers
    states: list[torch.Tensor] = []
    first = blocks[0].register_forward_pre_hook(lambda _m, args, kwargs: states.append(args[0][0]), with_kwargs=True)
    hooks = [
        block.register_forward_hook(lambda _m, _a, out: states.append((out[0] if isinstance(out, tuple) else out)[0]))
        for block in blocks
    ]
    try:
        with torch.no_grad():
            model(input_ids=ids, use_cache=False)
    finally:
        for hook in [first, *hooks]:
            hook.remove()
    return torch.stack(states)


@pytest.mark.slow
def test_angular_on_gemma4_with_kv_sharing_matches_float64_block_outputs(tmp_path):
    torch.manual_seed(4)
    config = kv_sharing_config("gemma4", [F, F, S, F], 1)
    model = randomize_norms(tf.AutoModelForCausalLM.from_config(config).eval(), lambda n: "norm" in n.lower())
    assert model.model.layers[3].self_attn.is_kv_shared_layer
    model.save_pretrained(tmp_path)
    byte_level_tokenizer(add_bos=True).save_pretrained(tmp_path)
    spec = angular_spec(tmp_path, tokens=160, seq_len=32)
    result = run_angular(spec)
    reference = tf.AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float64).eval()
    windows = build_windows(tf.AutoTokenizer.from_pretrained(tmp_path), iter_documents(spec.corpus), 160, 32)
    total, count = torch.zeros(5, 5, dtype=torch.float64), 0
    for window in windows:
        states = _block_states(reference, torch.tensor([window.input_ids]))
        unit = states / states.norm(dim=-1, keepdim=True)
        cos = torch.einsum("ith,jth->tij", unit, unit).clamp(-1, 1)
        total += (torch.arccos(cos) / math.pi).sum(0)
        count += states.shape[1]
    expected = total / count
    expected.fill_diagonal_(0)
    got = torch.tensor(result.distance, dtype=torch.float64)
    assert got.shape == (5, 5)
    torch.testing.assert_close(got, expected, atol=2e-6, rtol=0)
