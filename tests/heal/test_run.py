"""`layerprobe heal` end to end on a tiny LLaMA: heal.json, the saved checkpoint, and the test's own checks.

The saved healed checkpoint is loaded with from_pretrained and compared, on the held-out windows, with
(a) the pruned model with the map T applied by a hook, T solved here by numpy's lstsq on activations the
test records itself on the calibration windows, and (b) the original and the pruned model: KL(original ‖
healed) < KL(original ‖ pruned), computed here.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import transformers as tf
from command_line import invoke
from factories import build_checkpoint

from layerprobe.core import BUILTIN_CORPUS, CorpusSpec, ModelSpec
from layerprobe.data import windows_before_loading
from layerprobe.heal import split_windows
from layerprobe.results import read_heal

CAL, HELD, SEQ = 1024, 1024, 64


@pytest.fixture(scope="module")
def healed_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("heal")
    source = build_checkpoint("llama", root / "src", num_layers=5)
    result = invoke(
        "heal", source, "--remove", "2-3", "--dataset", BUILTIN_CORPUS, "--tokens", CAL, "--held-out-tokens", HELD,
        "--seq-len", SEQ, "--device", "cpu", "--save", root / "healed", "--out", root / "out", "--quiet",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    return source, root, result


def _windows(source):
    corpus = CorpusSpec(dataset=BUILTIN_CORPUS, tokens=CAL + HELD, seq_len=SEQ)
    _, windows, _ = windows_before_loading(ModelSpec(str(source), device="cpu"), corpus)
    return split_windows(windows, CAL)


def _kl(base_logits, logits):
    base = torch.log_softmax(base_logits.double(), -1)
    other = torch.log_softmax(logits.double(), -1)
    return float((base.exp() * (base - other)).sum(-1)[:, :-1].mean())


@pytest.mark.slow
def test_healed_checkpoint_is_the_pruned_model_with_the_map_and_is_closer(healed_run):
    source, root, result = healed_run
    assert "parameters" in result.output and "layerprobe gain" in result.output
    healed = tf.AutoModelForCausalLM.from_pretrained(root / "healed").eval()
    original = tf.AutoModelForCausalLM.from_pretrained(source).eval()
    assert healed.config.num_hidden_layers == 3
    calibration, held_out = _windows(source)
    # T from the test's own records: c = MLP output of block 1, y = x^4 − x^2, numpy lstsq in float64
    records = {"c": [], "y": []}
    seen = {}
    layers = original.model.layers
    layers[1].mlp.register_forward_hook(lambda _m, _a, out: seen.__setitem__("c", out))
    layers[2].register_forward_pre_hook(
        lambda _m, a, k: seen.__setitem__("s", k.get("hidden_states", a[0] if a else None)), with_kwargs=True
    )  # noqa: E501
    layers[4].register_forward_pre_hook(
        lambda _m, a, k: seen.__setitem__("e", k.get("hidden_states", a[0] if a else None)), with_kwargs=True
    )  # noqa: E501
    with torch.no_grad():
        for w in calibration:
            original(input_ids=torch.tensor([w.input_ids]))
            records["c"].append(seen["c"].double().reshape(-1, 48).numpy())
            records["y"].append((seen["e"].double() - seen["s"].double()).reshape(-1, 48).numpy())
    c, y = np.vstack(records["c"]), np.vstack(records["y"])
    solution, *_ = np.linalg.lstsq(c, y, rcond=None)
    transform = torch.as_tensor(solution.T, dtype=torch.float32)
    ids = torch.tensor([w.input_ids for w in held_out if len(w.input_ids) == SEQ])
    with torch.no_grad():
        base = original(input_ids=ids).logits
        kept = torch.nn.ModuleList([layers[i] for i in (0, 1, 4)])
        original.model.layers = kept
        original.config.num_hidden_layers = 3
        for new, block in enumerate(kept):
            block.self_attn.layer_idx = new
        pruned = original(input_ids=ids, use_cache=False).logits
        handle = kept[1].register_forward_hook(lambda _m, _a, out: out + seen["c"] @ transform.T)
        reference = original(input_ids=ids, use_cache=False).logits
        handle.remove()
        got = healed(input_ids=ids).logits
    torch.testing.assert_close(got, reference, rtol=2e-4, atol=2e-4)
    assert _kl(base, got) < _kl(base, pruned)
    heal = read_heal(root / "out" / "heal.json")
    assert heal.removed == [2, 3] and heal.spans == [[2, 4]]
    kl = heal.metrics["kl"]
    assert kl["healed"]["value"] < kl["pruned"]["value"]
    assert (
        kl["recovery"]["defined"] and kl["recovery"]["ci95"][0] <= kl["recovery"]["value"] <= kl["recovery"]["ci95"][1]
    )
    data = json.loads((root / "out" / "heal.json").read_text())
    cal, held = data["data"]["calibration"], data["data"]["held_out"]
    assert cal["windows"][1] == held["windows"][0] and cal["tokens"] >= CAL
    assert (root / "out" / "heal.png").is_file()
    record = json.loads((root / "healed" / "layerprobe.json").read_text())
    assert record["heal"]["method"] == "linear"


@pytest.mark.slow
def test_lora_after_linear_lowers_held_out_kl_and_resumes(healed_run, tmp_path):
    """linear+lora on the same cut: the saved checkpoint's held-out KL (computed here) is below linear's."""
    source, root, _ = healed_run
    args = (
        "heal", source, "--remove", "2-3", "--dataset", BUILTIN_CORPUS, "--tokens", CAL, "--held-out-tokens", HELD,
        "--seq-len", SEQ, "--device", "cpu", "--method", "linear+lora", "--steps", 40, "--lr", "3e-3", "--rank", 4,
        "--checkpoint-every", 20, "--batch-size", 4, "--quiet",
    )  # fmt: skip
    result = invoke(*args, "--save", tmp_path / "lora", "--out", tmp_path / "out")
    assert result.exit_code == 0, result.output
    _, held_out = _windows(source)
    ids = torch.tensor([w.input_ids for w in held_out if len(w.input_ids) == SEQ])
    with torch.no_grad():
        base = tf.AutoModelForCausalLM.from_pretrained(source).eval()(input_ids=ids).logits
        linear = tf.AutoModelForCausalLM.from_pretrained(root / "healed").eval()(input_ids=ids).logits
        lora = tf.AutoModelForCausalLM.from_pretrained(tmp_path / "lora").eval()(input_ids=ids).logits
    assert _kl(base, lora) < _kl(base, linear)
    heal = read_heal(tmp_path / "out" / "heal.json")
    assert heal.lora is not None and len(heal.lora["losses"]) == 40
    assert (tmp_path / "out" / "heal-state" / "lora_state.pt").is_file()
    # --resume from the finished state: no step is trained again, the losses are the recorded ones
    again = invoke(*args, "--resume", "--out", tmp_path / "out")
    assert again.exit_code == 0, again.output
    assert read_heal(tmp_path / "out" / "heal.json").lora["losses"] == heal.lora["losses"]
