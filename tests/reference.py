"""Independent computations the tests compare layerprobe against (float64, no hooks, no layerprobe code).

The references run the model the plain way (`output_hidden_states`, lm-eval's own entry point, a model
rebuilt from a config without the removed blocks) and compute in float64 what layerprobe computes.
"""

from __future__ import annotations

import contextlib
import copy
import math
from collections.abc import Iterator
from itertools import combinations

import numpy as np
import pytest
import torch
import transformers as tf
from factories import TASKS_DIR

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


# The output projections of each small family, by name: what "zeroing a sublayer's output projection" means.
PROJECTIONS = {
    "llama": ("self_attn.o_proj.", ("mlp.down_proj.",)),
    "qwen3": ("self_attn.o_proj.", ("mlp.down_proj.",)),
    "gemma2": ("self_attn.o_proj.", ("mlp.down_proj.",)),
    # every routed expert (fused or not) and the shared expert
    "qwen2_moe": ("self_attn.o_proj.", ("mlp.experts.down_proj", "mlp.experts.", "mlp.shared_expert.down_proj.")),
    "gpt_neox": ("attention.dense.", ("mlp.dense_4h_to_h.",)),
    "gpt2": ("attn.c_proj.", ("mlp.c_proj.",)),
    "bert": ("attention.output.dense.", ("output.dense.",)),
}
# Where each small family keeps its blocks (the causal LMs, BERT's bare encoder).
SMALL_BLOCKS = {
    "llama": "model.layers",
    "qwen3": "model.layers",
    "gemma2": "model.layers",
    "qwen2_moe": "model.layers",
    "gpt_neox": "gpt_neox.layers",
    "gpt2": "transformer.h",
    "bert": "encoder.layer",
}


def is_projection(family: str, unit: str, name: str) -> bool:
    """Whether parameter `name` of a block belongs to the output projection of its `unit` sublayer."""
    attention, mlp = PROJECTIONS[family]
    if unit == "attention":
        return name.startswith(attention)
    if family == "qwen2_moe" and name.startswith("mlp.experts."):
        return "down" in name  # fused or per-expert down projections
    return any(name.startswith(p) for p in mlp)


def zeroed_projections(model, family: str, unit: str, block: int):
    """A deep copy of `model` whose `unit` output projection weights and biases in `block` are zero."""
    twin = copy.deepcopy(model)
    zeroed = []
    with torch.no_grad():
        for name, param in twin.get_submodule(SMALL_BLOCKS[family])[block].named_parameters():
            if is_projection(family, unit, name):
                param.zero_()
                zeroed.append(name)
    assert zeroed, (family, unit)
    return twin


def continuation_loglikelihood(model, context: list[int], continuation: list[int]) -> float:
    """log P(continuation | context) by one plain forward pass, summed in float64."""
    ids = torch.tensor([context + continuation])
    with torch.no_grad():
        logprobs = model(input_ids=ids).logits[0].double().log_softmax(-1)
    start = len(context)
    return float(sum(logprobs[start + k - 1, token] for k, token in enumerate(continuation)))


def load_without_block(model, rebuilt, index: int, prefix: str = "model.layers."):
    """Load `model`'s weights without block `index` into `rebuilt`, a model built from its own smaller config.

    For families whose per-layer pattern is derived (Jamba, RecurrentGemma): the test writes the config
    the kept blocks form, and every weight must land in it (strict).
    """
    state = {}
    for key, value in model.state_dict().items():
        if key.startswith(prefix):
            block, rest = key[len(prefix) :].split(".", 1)
            if int(block) == index:
                continue
            key = f"{prefix}{int(block) - (int(block) > index)}.{rest}"
        state[key] = value
    rebuilt.load_state_dict(state, strict=True)
    return rebuilt


def deleted_span_float64(path, arch, span, directory):
    """The model with every block of `span` physically deleted, one at a time (highest first), in float64."""
    current = path
    for step, layer in enumerate(sorted(span, reverse=True)):
        model = physically_deleted(current, arch, layer, dtype=torch.float64)
        current = directory / f"deleted_{step}"
        model.save_pretrained(current)
    return tf.AutoModelForCausalLM.from_pretrained(current, dtype=torch.float64).eval()


def corpus_reference(base, variant, windows) -> dict[str, list[float]]:
    """Per-window mean NLL, KL(P_base ‖ P_variant), top-1 agreement, one window at a time in float64."""
    out: dict[str, list[float]] = {"nll": [], "kl": [], "top1": []}
    with torch.no_grad():
        for window in windows:
            ids = torch.tensor([window.input_ids])
            lp_base = base(input_ids=ids).logits[0, :-1].log_softmax(-1)
            lp_var = variant(input_ids=ids).logits[0, :-1].log_softmax(-1)
            target = ids[0, 1:]
            out["nll"].append(float(-lp_var[torch.arange(len(target)), target].mean()))
            out["kl"].append(float((lp_base.exp() * (lp_base - lp_var)).sum(-1).mean()))
            out["top1"].append(float((lp_base.argmax(-1) == lp_var.argmax(-1)).double().mean()))
    return out


def lm_eval_reference(
    model, tokenizer, tasks, batch_size: int = 4, seed: int = 1234, tasks_dir=TASKS_DIR, **settings
) -> dict:
    """lm-eval's own entry point on `model`: a fresh HFLM and freshly built local tasks, every RNG seeded.

    `settings` go to `simple_evaluate` (limit, num_fewshot, log_samples, bootstrap_iters: 1000 unless given);
    `tasks_dir` is the include path of the local task YAMLs.
    """
    import lm_eval
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(tasks_dir)  # plain lm-eval resolves the YAMLs' relative data_files against the cwd
        manager = TaskManager(include_path=str(tasks_dir), include_defaults=False)
        lm = HFLM(pretrained=model, tokenizer=tokenizer, batch_size=batch_size)
        return lm_eval.simple_evaluate(
            model=lm,
            tasks=list(tasks),
            task_manager=manager,
            random_seed=seed,
            numpy_random_seed=seed,
            torch_random_seed=seed,
            fewshot_random_seed=seed,
            **{"bootstrap_iters": 1000, **settings},
        )


# ---------------------------------------------------------------- angular distances per position, numpy
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


def chance_by_enumeration(blocks: int, k: int) -> float:
    """Mean Jaccard overlap of every pair of k-subsets of the blocks (independent, uniform)."""
    subsets = [set(c) for c in combinations(range(blocks), k)]
    total = sum(len(a & b) / len(a | b) for a in subsets for b in subsets)
    return total / len(subsets) ** 2


def direct_ratio_stderr(windows: np.ndarray, positions: np.ndarray) -> tuple[float, float]:
    """The ratio estimator written out: per-window means a_w weighted by n_w (docs/methods.md)."""
    a = windows.mean(axis=1)
    n = positions.astype(float)
    mean = float((n * a).sum() / n.sum())
    k = len(a)
    se = math.sqrt(k / (k - 1) * float((n**2 * (a - mean) ** 2).sum())) / float(n.sum())
    return mean, se


def agresti_min(b: int, c: int, n: int) -> tuple[float, float]:
    """Agresti & Min (2005): the Wald interval of the paired table with 1/2 added to each of its four cells."""
    total = n + 2
    p_lost, p_gained = (b + 0.5) / total, (c + 0.5) / total  # right → wrong, wrong → right
    centre = p_gained - p_lost
    half = 1.959963984540054 * math.sqrt((p_gained + p_lost - centre**2) / total)
    return centre - half, centre + half


def holm_adjusted(pvalues: list[float]) -> list[float]:
    """Holm's step-down adjusted p-values: sort, multiply the i-th smallest by m − i, keep the running max."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: (pvalues[i], i))
    out, running = [0.0] * m, 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        out[i] = running
    return out
