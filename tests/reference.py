"""Independent computations the tests compare layerprobe against (float64, no hooks, no layerprobe code)."""

from __future__ import annotations

import contextlib
import copy
import math
from collections.abc import Iterator

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
                states = states[:, window.last_text_position : window.last_text_position + 1]
            unit = states / states.norm(dim=-1, keepdim=True)
            cos = torch.einsum("ith,jth->tij", unit, unit).clamp(-1, 1)
            sums = (torch.arccos(cos) / math.pi).sum(0)
            total = sums if total is None else total + sums
            count += states.shape[1]
    mean = total / count
    mean.fill_diagonal_(0)
    return mean


# Where each tiny architecture keeps its blocks in the model with a head (written out, not discovered).
BLOCKS_PATH = {
    "llama": "model.layers",
    "qwen3": "model.layers",
    "deepseek_v3": "model.layers",
    "gpt2": "transformer.h",
    "bert_qa": "bert.encoder.layer",
}


def physically_deleted(path, arch, layer, dtype=torch.float32):
    """An independent reference: a fresh model built from a config with L-1 layers, weights remapped.

    `layer` may also be a list of blocks (a span): all of them are deleted.

    Causal LMs come back as `AutoModelForCausalLM`, `bert_qa` as `AutoModelForQuestionAnswering`.
    """
    auto = tf.AutoModelForQuestionAnswering if arch == "bert_qa" else tf.AutoModelForCausalLM
    model = auto.from_pretrained(path, dtype=dtype)
    config = copy.deepcopy(model.config)
    gone = {layer} if isinstance(layer, int) else set(layer)
    L = config.num_hidden_layers
    config.num_hidden_layers = L - len(gone)
    if getattr(config, "layer_types", None):
        config.layer_types = [t for i, t in enumerate(config.layer_types) if i not in gone]
    if hasattr(config, "first_k_dense_replace"):  # DeepSeek: dense blocks come first
        config.first_k_dense_replace -= sum(g < config.first_k_dense_replace for g in gone)
    prefix = BLOCKS_PATH[arch] + "."
    state = {}
    for key, value in model.state_dict().items():
        if key.startswith(prefix):
            index, rest = key[len(prefix) :].split(".", 1)
            index = int(index)
            if index in gone:
                continue
            key = f"{prefix}{index - sum(g < index for g in gone)}.{rest}"
        state[key] = value
    fresh = auto.from_config(config, dtype=dtype)
    missing, unexpected = fresh.load_state_dict(state, strict=False)
    assert not unexpected and all("rotary" in k or "inv_freq" in k or "attn.bias" in k for k in missing), missing
    return fresh.eval()


@contextlib.contextmanager
def counted_block_rows(blocks) -> Iterator[dict[str, int]]:
    """Count every call of every block, weighted by its batch rows (probes included): {"count": rows}.

    The independent tally the tests hold Progress's block events (and the engines' work) against.
    """
    seen = {"count": 0}

    def count(_module, args, kwargs) -> None:
        hidden = args[0] if args else kwargs["hidden_states"]
        seen["count"] += int(hidden.shape[0])

    handles = [block.register_forward_pre_hook(count, with_kwargs=True) for block in blocks]
    try:
        yield seen
    finally:
        for handle in handles:
            handle.remove()


def squad_v11_json(paragraphs) -> dict:
    """The official SQuAD v1.1 layout for (title, context, [(id, question, [answers])]) paragraphs."""
    return {
        "version": "1.1",
        "data": [
            {
                "title": title,
                "paragraphs": [
                    {
                        "context": context,
                        "qas": [
                            {
                                "id": qid,
                                "question": question,
                                "answers": [{"text": g, "answer_start": context.index(g)} for g in golds],
                            }
                            for qid, question, golds in qas
                        ],
                    }
                ],
            }
            for title, context, qas in paragraphs
        ],
    }
