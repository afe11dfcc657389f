"""`layerprobe gain`: what a smaller checkpoint buys on this machine — parameters, bytes, memory, speed.

Every model is loaded once, then timed in interleaved rounds (round r times every model once, in the
given order), so a machine that warms up, throttles or is shared affects all of them alike; one untimed
warm-up run per model comes first. A run is a prefill (one forward pass over `batch` prompts of
`prompt_tokens` random token ids) and a decode (`generate` of exactly `new_tokens` greedy tokens with the
KV cache, from the same prompts); decode tokens/s = batch·new_tokens / (generate time − prefill time).
On a GPU the device is synchronised before every clock read and the peak allocated memory of the
run is read from the allocator (reset per run); on CPU peak memory is not measured (null). Each
candidate's ratio to the original is the median over rounds of the per-round ratio (paired by round),
with the 25th–75th percentiles as its spread.
"""

from __future__ import annotations

import statistics
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from layerprobe.core import GainSpec, LayerprobeError, ModelSpec, recorded_values
from layerprobe.export import weight_bytes
from layerprobe.model import load_model

if TYPE_CHECKING:
    import torch


def _sync(device: torch.device | None) -> None:
    import torch

    if device is not None and device.type == "cuda":
        torch.cuda.synchronize(device)


def _one_run(model: Any, ids: torch.Tensor, new_tokens: int, device: torch.device | None) -> dict[str, float | None]:
    import torch

    cuda = device is not None and device.type == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
    with torch.inference_mode():
        _sync(device)
        clock = time.perf_counter()
        model(input_ids=ids, use_cache=True)
        _sync(device)
        prefill = time.perf_counter() - clock
        clock = time.perf_counter()
        model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
            do_sample=False,
            pad_token_id=0,
        )
        _sync(device)
        generate = time.perf_counter() - clock
    peak = int(torch.cuda.max_memory_allocated(device)) if cuda else None  # bytes: an integer in gain.json
    return {"prefill_seconds": prefill, "generate_seconds": generate, "peak_memory_bytes": peak}


def run_gain(specs: list[ModelSpec], settings: GainSpec, on_run: Any = None) -> dict[str, Any]:
    """Measure every model (the first is the original) and return gain.json's body (without the schema)."""
    import torch

    if len(specs) < 2:
        raise LayerprobeError("gain needs the original and at least one candidate.", hint="layerprobe gain ORIG CAND")
    loaded = [load_model(spec, purpose="head") for spec in specs]
    vocab = min(int(getattr(m.model.get_input_embeddings(), "num_embeddings", 3 + 1)) for m in loaded)
    generator = torch.Generator().manual_seed(settings.seed)
    prompts = torch.randint(3, vocab, (settings.batch, settings.prompt_tokens), generator=generator)
    runs: list[list[dict[str, float | None]]] = [[] for _ in loaded]
    for m in loaded:  # warm-up, not timed
        _one_run(m.model, prompts.to(m.input_device), settings.new_tokens, m.input_device)
    for _round in range(settings.repeats):
        for index, m in enumerate(loaded):
            runs[index].append(_one_run(m.model, prompts.to(m.input_device), settings.new_tokens, m.input_device))
            if on_run:
                on_run(1)
    tokens_prefill = settings.batch * settings.prompt_tokens
    tokens_decode = settings.batch * settings.new_tokens
    models = []
    for spec, m, measured in zip(specs, loaded, runs, strict=True):
        check_decode_measured(spec.display_name, measured, settings.new_tokens)
        prefill = [tokens_prefill / r["prefill_seconds"] for r in measured]  # type: ignore[operator]
        decode = [
            tokens_decode / (r["generate_seconds"] - r["prefill_seconds"])  # type: ignore[operator]
            for r in measured
        ]
        peaks = [r["peak_memory_bytes"] for r in measured]
        models.append(
            {
                "model": spec.display_name,
                "parameters": int(m.model.num_parameters()),
                "bytes_on_disk": weight_bytes(spec.model),
                "dtype": m.dtype,
                "device": m.device_label,
                "num_layers": int(getattr(m.model.config, "num_hidden_layers", 0) or 0),
                "prefill_tokens_per_second": prefill,
                "decode_tokens_per_second": decode,
                "peak_memory_bytes": None if peaks[0] is None else max(p or 0 for p in peaks),
                "median": {
                    "prefill_tokens_per_second": statistics.median(prefill),
                    "decode_tokens_per_second": statistics.median(decode),
                },
            }
        )
    base = models[0]
    for entry in models:
        entry["ratios"] = ratios(base, entry)
    return {
        "settings": {**recorded_values(settings), "order": "interleaved"},
        "models": models,
    }


def check_decode_measured(model: str, measured: list[dict[str, float | None]], new_tokens: int) -> None:
    """Refuse a decode speed lost in timing noise: generating took no longer than the prompt's prefill alone.

    Decode time is generate − prefill (generate runs the prefill, then each new token from the KV cache);
    where a round's difference is not positive, tokens / difference would be an absurd or negative speed.
    """
    for number, run in enumerate(measured, 1):
        generate, prefill = run["generate_seconds"], run["prefill_seconds"]
        assert generate is not None and prefill is not None
        if generate <= prefill:
            raise LayerprobeError(
                f"{model}: round {number} generated {new_tokens} tokens in {generate:.4g} s, no longer than the "
                f"prefill alone ({prefill:.4g} s), so its decode speed is not measurable.",
                hint=f"Generate more tokens per prompt, e.g. --new-tokens {max(4 * new_tokens, 64)}.",
            )


def ratios(base: dict[str, Any], entry: dict[str, Any]) -> dict[str, Any]:
    """Candidate ÷ original: exact for sizes, median and 25–75 % spread of per-round ratios for speeds."""
    found: dict[str, Any] = {}
    for key in ("parameters", "bytes_on_disk", "peak_memory_bytes"):
        a, b = base[key], entry[key]
        found[key] = None if a in (None, 0) or b is None else b / a
    for key in ("prefill_tokens_per_second", "decode_tokens_per_second"):
        per_round = np.asarray(entry[key]) / np.asarray(base[key])
        low, mid, high = (float(np.percentile(per_round, q)) for q in (25, 50, 75))
        found[key] = {"median": mid, "spread": [low, high]}
    return found
