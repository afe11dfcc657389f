"""`lp.angular` / `lp.depth` on a live model: the CLI's numbers on the saved checkpoint, the model left bit-identical.

"Bit-identical" is checked field by field against a snapshot taken before: every parameter and buffer
(values, device, dtype), each module's `training` flag and hooks, every `requires_grad` and `.grad`.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import transformers as tf
from command_line import invoke

import layerprobe as lp
from layerprobe.core import LayerprobeError
from layerprobe.results import AngularResult, DepthResult, load_result

CORPUS = dict(tokens=600, seq_len=96, batch_size=3)
CLI_CORPUS = ["--dataset", "builtin:pydoc", "--tokens", "600", "--seq-len", "96", "--batch-size", "3"]


def snapshot(model: torch.nn.Module) -> dict:
    """Everything the API promises to leave as it found it."""
    return {
        "tensors": {k: (v.detach().clone(), v.device, v.dtype) for k, v in model.state_dict(keep_vars=True).items()},
        "training": {name: m.training for name, m in model.named_modules()},
        "hooks": {
            name: tuple(
                tuple(getattr(m, kind).keys())
                for kind in ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
            )
            for name, m in model.named_modules()
        },
        "requires_grad": {name: p.requires_grad for name, p in model.named_parameters()},
        "grad": {name: None if p.grad is None else p.grad.clone() for name, p in model.named_parameters()},
        "grad_identity": {name: id(p.grad) for name, p in model.named_parameters()},
    }


def assert_same(before: dict, after: dict) -> None:
    assert before["training"] == after["training"]
    assert before["hooks"] == after["hooks"]
    assert before["requires_grad"] == after["requires_grad"]
    assert before["grad_identity"] == after["grad_identity"]
    for name, (value, device, dtype) in before["tensors"].items():
        now, now_device, now_dtype = after["tensors"][name]
        assert (now_device, now_dtype) == (device, dtype), name
        assert torch.equal(now, value), name
    for name, grad in before["grad"].items():
        now = after["grad"][name]
        assert (grad is None) == (now is None), name
        assert grad is None or torch.equal(grad, now), name


@pytest.fixture
def live(tiny_checkpoints):
    """The tiny LLaMA as a training script holds it: half in training mode, a hook, a frozen and a stale-grad param."""
    path = tiny_checkpoints["llama"]
    model = tf.AutoModelForCausalLM.from_pretrained(path)
    tokenizer = tf.AutoTokenizer.from_pretrained(path)
    model.train()
    model.model.layers[1].eval()
    handle = model.model.layers[2].register_forward_hook(lambda *_: None)
    model.model.embed_tokens.weight.requires_grad_(False)
    for p in model.model.layers[0].parameters():
        p.grad = torch.randn_like(p)
    yield path, model, tokenizer
    handle.remove()


@pytest.mark.slow
def test_angular_and_depth_on_a_live_model_match_the_cli_and_leave_it_untouched(live, tmp_path):
    path, model, tokenizer = live
    before = snapshot(model)
    angular = lp.angular(model, tokenizer, "builtin:pydoc", **CORPUS)
    depth = lp.depth(model, tokenizer, "builtin:pydoc", grad=True, **CORPUS)
    assert_same(before, snapshot(model))
    assert isinstance(angular, AngularResult) and isinstance(depth, DepthResult)
    assert angular.model.weights_fingerprint is None  # a live model's weights need not be any file's

    result = invoke("angular", path, *CLI_CORPUS, "--device", "cpu", "--quiet", "--out", tmp_path / "a")
    assert result.exit_code == 0, result.output
    cli = json.loads((tmp_path / "a" / "angular.json").read_text())
    np.testing.assert_allclose(angular.distance, cli["distance"], atol=2e-6)
    np.testing.assert_allclose(angular.distance_stderr, cli["distance_stderr"], atol=2e-6)
    assert angular.data == cli["data"] | {"dataset": "builtin:pydoc"}

    result = invoke("depth", path, "--grad", *CLI_CORPUS, "--device", "cpu", "--quiet", "--out", tmp_path / "d")
    assert result.exit_code == 0, result.output
    cli = json.loads((tmp_path / "d" / "depth.json").read_text())
    np.testing.assert_allclose(depth.rms.mean, cli["residual"]["rms"]["mean"], rtol=1e-5)
    np.testing.assert_allclose(depth.update.mean, cli["update"]["relative"]["mean"], rtol=1e-5)
    np.testing.assert_allclose(depth.grad.block, cli["grad"]["block"], rtol=1e-4)


@pytest.mark.slow
def test_a_hub_id_or_path_goes_the_commands_way(tiny_checkpoints):
    path = tiny_checkpoints["llama"]
    result = lp.angular(str(path), corpus="builtin:pydoc", device="cpu", **CORPUS)
    assert result.model.id == str(path) and result.model.weights_fingerprint is not None
    model = tf.AutoModel.from_pretrained(path)
    live = lp.angular(model, tf.AutoTokenizer.from_pretrained(path), "builtin:pydoc", **CORPUS)
    np.testing.assert_allclose(result.distance, live.distance, atol=1e-6)


def test_a_list_of_strings_is_a_corpus(tiny_checkpoints):
    path = tiny_checkpoints["llama"]
    model = tf.AutoModel.from_pretrained(path)
    tokenizer = tf.AutoTokenizer.from_pretrained(path)
    texts = ["The quick brown fox jumps over the lazy dog. " * 20, "Pack my box with five dozen jugs. " * 20]
    result = lp.angular(model, tokenizer, texts, tokens=256, seq_len=64)
    assert result.data["dataset"] == "texts" and result.data["config"] is None and result.data["split"] is None
    assert result.data["tokens"] == 256


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda m, t: lp.angular(m, None, "builtin:pydoc"), "A live model needs its tokenizer."),
        (lambda m, t: lp.angular(m, t, 42), "corpus must be a dataset id"),
        (lambda m, t: lp.angular(m, t, []), "non-empty list of strings"),
        (lambda m, t: lp.angular(m, t, "builtin:pydoc", dtype="float16"), "dtype= loads a checkpoint"),
        (lambda m, t: lp.angular(m, t, "builtin:pydoc", dtyp="float16"), "Unknown keyword dtyp="),
        (lambda m, t: lp.angular(3.5), "model must be a transformers model"),
        (lambda m, t: lp.angular("some/model", t), "A tokenizer was given with a hub id"),
        (lambda m, t: lp.depth(m.model, t, "builtin:pydoc", grad=True, tokens=128), "no language-modelling head"),
        (lambda m, t: lp.angular(m, t, "builtin:pydoc", positions="first"), "Unknown --positions"),
    ],
)
def test_bad_arguments_are_one_line_errors(live, call, message):
    _, model, tokenizer = live
    before = snapshot(model)
    with pytest.raises(LayerprobeError, match=message):
        call(model, tokenizer)
    assert_same(before, snapshot(model))


@pytest.mark.slow
def test_results_in_a_notebook(tiny_checkpoints, tmp_path):
    """to_frame, plot, save (files the CLI's readers take), short repr, HTML."""
    path = tiny_checkpoints["llama"]
    model = tf.AutoModel.from_pretrained(path)
    result = lp.angular(model, tf.AutoTokenizer.from_pretrained(path), "builtin:pydoc", tokens=256, seq_len=64)
    frame = result.to_frame()
    assert list(frame["block"]) == [0, 1, 2, 3]
    assert list(frame["adjacent_distance"]) == [result.distance[l][l + 1] for l in range(4)]
    assert repr(result).startswith("<AngularResult ") and "4 blocks" in repr(result) and len(repr(result)) < 200
    assert result._repr_html_().count("<tr>") == 5
    figure = result.plot()
    assert type(figure).__name__ == "Figure"
    written = result.save(tmp_path / "run")
    assert [p.name for p in written] == ["angular.json", "angular.png", "angular.pdf"]
    assert load_result(tmp_path / "run" / "angular.json").distance == result.distance
    assert invoke("plot", tmp_path / "run" / "angular.json").exit_code == 0


def test_to_frame_without_pandas_is_one_line(tiny_checkpoints, monkeypatch):
    import sys

    path = tiny_checkpoints["llama"]
    model = tf.AutoModel.from_pretrained(path)
    result = lp.angular(model, tf.AutoTokenizer.from_pretrained(path), "builtin:pydoc", tokens=128, seq_len=64)
    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(LayerprobeError, match="to_frame\\(\\) needs pandas") as error:
        result.to_frame()
    assert error.value.hint == "pip install 'layerprobe[notebook]'"
