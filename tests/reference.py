"""Independent computations the tests compare layerprobe against (float64, no hooks, no layerprobe code)."""

from __future__ import annotations

import math

import torch
import transformers as tf

# Where each tiny architecture keeps the norm applied after its last block (none for Post-LN BERT).
FINAL_NORM = {"llama": "norm", "qwen3": "norm", "deepseek_v3": "norm", "gpt2": "ln_f", "bert": None}


def float64_base_model(path, arch: str):
    """The base model in float64 with its final norm removed, so hidden_states[-1] is the raw x^L."""
    kwargs = {"experts_implementation": "eager"} if arch == "deepseek_v3" else {}
    model = tf.AutoModel.from_pretrained(path, dtype=torch.float64, **kwargs).eval()
    if FINAL_NORM.get(arch):
        setattr(model, FINAL_NORM[arch], torch.nn.Identity())
    return model


def reference_distances(model, windows, positions: str = "all") -> torch.Tensor:
    """Mean arccos(cos)/π over positions, from output_hidden_states, one window at a time, in float64."""
    total, count = None, 0
    with torch.no_grad():
        for window in windows:
            out = model(input_ids=torch.tensor([window.input_ids]), output_hidden_states=True)
            states = torch.stack([h[0] for h in out.hidden_states])  # (L+1, T, H)
            if positions == "last":
                states = states[:, window.last_text_position:window.last_text_position + 1]
            unit = states / states.norm(dim=-1, keepdim=True)
            cos = torch.einsum("ith,jth->tij", unit, unit).clamp(-1, 1)
            sums = (torch.arccos(cos) / math.pi).sum(0)
            total = sums if total is None else total + sums
            count += states.shape[1]
    mean = total / count
    mean.fill_diagonal_(0)
    return mean
