"""`layerprobe depth`: every statistic against an independent float64 computation with the test's own hooks."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
import transformers as tf
from factories import build_checkpoint, minilm_dir
from typer.testing import CliRunner

from layerprobe.cli.app import app
from layerprobe.core import BUILTIN_CORPUS, CorpusSpec, DepthSpec, ModelSpec
from layerprobe.core.errors import LayerprobeError
from layerprobe.data import build_windows, iter_documents
from layerprobe.measure.depth import run_depth
from layerprobe.measure.gradients import MASK_FRACTION, mask_window
from layerprobe.results import DepthResult, write_json
from layerprobe.results.io import DEPTH_SCHEMA

torch.set_num_threads(1)  # tiny tensors: threads only contend on a shared machine
runner = CliRunner()
TOKENS, SEQ = 192, 32


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("depth")
    out = {arch: build_checkpoint(arch, root / arch, num_layers=3) for arch in ("llama", "bert")}
    torch.manual_seed(0)  # an encoder that ships its masked-LM head, for --grad
    config = tf.BertConfig(
        vocab_size=30522,
        hidden_size=32,
        intermediate_size=64,
        num_attention_heads=4,
        num_hidden_layers=3,
        max_position_embeddings=128,
        architectures=["BertForMaskedLM"],
    )
    model = tf.BertForMaskedLM(config).eval()
    model.save_pretrained(root / "bert_mlm")
    tf.AutoTokenizer.from_pretrained(minilm_dir()).save_pretrained(root / "bert_mlm")
    out["bert_mlm"] = root / "bert_mlm"
    return out


def _spec(path: Path, **kw) -> DepthSpec:
    corpus = CorpusSpec(BUILTIN_CORPUS, None, "train", "text", kw.pop("tokens", TOKENS), SEQ)
    return DepthSpec(ModelSpec(str(path), device="cpu", dtype="float32"), corpus, **kw)


def _windows(path: Path, tokens: int = TOKENS):
    tokenizer = tf.AutoTokenizer.from_pretrained(path)
    corpus = CorpusSpec(BUILTIN_CORPUS, None, "train", "text", tokens, SEQ)
    return build_windows(tokenizer, iter_documents(corpus), tokens, SEQ)


# Where each sublayer's output and residual are, known by construction (never by the code under test).
KNOWN = {
    "llama": {
        "attention": ("self_attn", ("block", None)),
        "mlp": ("mlp", ("input", "post_attention_layernorm")),
    },
    "bert": {
        "attention": ("attention.output.dense", ("block", None)),
        "mlp": ("output.dense", ("output", "attention")),
    },
}


def _reference(path: Path, arch: str, positions: str = "all") -> dict:
    """x^0 … x^L and sublayer (f, r) from the test's own hooks on a float64 copy; statistics in float64."""
    model = tf.AutoModel.from_pretrained(path).double().eval()
    blocks = model.layers if arch == "llama" else model.encoder.layer
    windows = _windows(path)
    states: list = []
    captured: dict = {}
    handles = []
    for l, block in enumerate(blocks):
        handles.append(
            block.register_forward_pre_hook(
                lambda m, a, k: states.append(a[0] if a else k["hidden_states"]), with_kwargs=True
            )
        )
        for kind, (out_name, (where, name)) in KNOWN[arch].items():
            handles.append(
                block.get_submodule(out_name).register_forward_hook(
                    lambda m, a, o, l=l, kind=kind: captured.__setitem__(
                        (l, kind, "f"), o[0] if isinstance(o, tuple) else o
                    )
                )
            )
            if where == "input":
                handles.append(
                    block.get_submodule(name).register_forward_pre_hook(
                        lambda m, a, l=l, kind=kind: captured.__setitem__((l, kind, "r"), a[0])
                    )
                )
            elif where == "output":
                handles.append(
                    block.get_submodule(name).register_forward_hook(
                        lambda m, a, o, l=l, kind=kind: captured.__setitem__(
                            (l, kind, "r"), o[0] if isinstance(o, tuple) else o
                        )
                    )
                )
            else:
                handles.append(
                    block.register_forward_pre_hook(
                        lambda m, a, k, l=l, kind=kind: captured.__setitem__(
                            (l, kind, "r"), a[0] if a else k["hidden_states"]
                        ),
                        with_kwargs=True,
                    )
                )
    handles.append(blocks[-1].register_forward_hook(lambda m, a, o: states.append(o[0] if isinstance(o, tuple) else o)))
    L = len(blocks)
    values = {"rms": [[] for _ in range(L + 1)], "var": [[] for _ in range(L + 1)], "upd": [[] for _ in range(L)]}
    values.update({k: [[] for _ in range(L)] for k in ("attention", "mlp")})
    with torch.no_grad():
        for w in windows:
            states.clear()
            captured.clear()
            model(input_ids=torch.tensor([w.input_ids]))
            last = w.last_text_position
            pick = (lambda t: t[0]) if positions == "all" else (lambda t, last=last: t[0, last : last + 1])
            xs = [pick(s) for s in states]
            for l, x in enumerate(xs):
                d = x.shape[-1]
                values["rms"][l].append(torch.sqrt((x * x).sum(-1) / d))
                mu = x.mean(-1, keepdim=True)
                values["var"][l].append(((x - mu) ** 2).sum(-1) / d)
                if l < L:
                    values["upd"][l].append(
                        torch.linalg.vector_norm(xs[l + 1] - x, dim=-1) / torch.linalg.vector_norm(x, dim=-1)
                    )
            for l in range(L):
                for kind in ("attention", "mlp"):
                    f, r = pick(captured[(l, kind, "f")]), pick(captured[(l, kind, "r")])
                    values[kind][l].append(torch.linalg.vector_norm(f, dim=-1) / torch.linalg.vector_norm(r, dim=-1))
    for h in handles:
        h.remove()
    out = {}
    for key, per_index in values.items():
        cat = [torch.cat(v) for v in per_index]
        out[key] = {"mean": [float(c.mean()) for c in cat], "std": [float(c.std(unbiased=False)) for c in cat]}
    return out


def _close(got: list[float], want: list[float], rel: float) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g == pytest.approx(w, rel=rel, abs=1e-12)


@pytest.mark.parametrize("arch", ["llama", "bert"])
def test_statistics_match_an_independent_float64_computation(checkpoints, arch):
    result = run_depth(_spec(checkpoints[arch], batch_size=2))
    ref = _reference(checkpoints[arch], arch)
    # The model runs in float32 here and in float64 in the reference: agreement to float32 accuracy.
    for ours, key in ((result.rms, "rms"), (result.variance, "var"), (result.update, "upd")):
        _close(ours.mean, ref[key]["mean"], 2e-4)
        _close(ours.std, ref[key]["std"], 2e-3)
    for kind in ("attention", "mlp"):
        _close(result.sublayers[kind]["relative"].mean, ref[kind]["mean"], 2e-4)
        _close(result.sublayers[kind]["relative"].std, ref[kind]["std"], 2e-3)
        assert result.sublayers[kind]["modules"] == [KNOWN[arch][kind][0]] * 3
    assert result.data["positions_averaged"] == TOKENS == result.rms.count[0]
    assert result.placement.pattern == ("Pre-LN" if arch == "llama" else "Post-LN")
    summary = result.to_dict()["summary"]
    assert summary["rms_growth"] == pytest.approx(result.rms.mean[-1] / result.rms.mean[0])


def test_last_positions_and_batch_size_independence(checkpoints):
    path = checkpoints["llama"]
    one, three = (
        run_depth(_spec(path, batch_size=1, positions="last")),
        run_depth(_spec(path, batch_size=3, positions="last")),
    )
    ref = _reference(path, "llama", positions="last")
    _close(one.rms.mean, ref["rms"]["mean"], 2e-4)
    _close(one.update.mean, ref["upd"]["mean"], 2e-4)
    _close(one.update.std, three.update.std, 1e-9)  # Chan's merge is exact whatever the batching
    assert one.data["positions_averaged"] == TOKENS // SEQ


def _autograd_norms(path: Path, causal: bool, seed: int = 1234) -> tuple[list[float], dict, float]:
    """‖∇ mean loss‖ per block from ONE batch of all windows and PyTorch's own mean cross-entropy."""
    head = tf.AutoModelForCausalLM if causal else tf.AutoModelForMaskedLM
    model = head.from_pretrained(path).double().eval()
    tokenizer = tf.AutoTokenizer.from_pretrained(path)
    windows = _windows(path)
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
def test_grad_norms_match_autograd_on_one_batch(checkpoints, arch, causal):
    result = run_depth(_spec(checkpoints[arch], batch_size=2, grad=True))
    block, subs, loss = _autograd_norms(checkpoints[arch], causal)
    grad = result.grad
    assert grad.loss == ("next-token" if causal else "masked-lm")
    _close(grad.block, block, 1e-4)
    for kind in ("attention", "mlp"):
        _close(grad.sublayers[kind], subs[kind], 1e-4)
    assert grad.mean_loss == pytest.approx(loss, rel=1e-5)
    windows = TOKENS // SEQ
    if causal:
        assert grad.positions == windows * (SEQ - 1)
    again = run_depth(_spec(checkpoints[arch], batch_size=5, grad=True)).grad
    _close(again.block, grad.block, 1e-5)  # the mean-loss gradient does not depend on the batch size


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


def test_result_round_trips_through_json(checkpoints, tmp_path):
    result = run_depth(_spec(checkpoints["llama"], grad=True))
    data = json.loads(json.dumps(result.to_dict()))
    assert data["schema"] == DEPTH_SCHEMA
    again = DepthResult.from_dict(data)
    assert again.to_dict() == result.to_dict()
    with pytest.raises(LayerprobeError, match="depth@1"):
        DepthResult.from_dict({**data, "schema": "layerprobe/angular@1"})
    broken = dict(
        data, residual={"rms": data["residual"]["rms"] | {"mean": [1.0]}, "variance": data["residual"]["variance"]}
    )
    with pytest.raises(LayerprobeError, match="L\\+1"):
        DepthResult.from_dict(broken)


def test_cli_writes_depth_json_and_figure(checkpoints, tmp_path):
    """The quick CLI check of the default run; the slow one below adds --grad, `plot` and `compare`."""
    args = ["depth", str(checkpoints["bert"]), "--dataset", BUILTIN_CORPUS, "--tokens", "64", "--seq-len", "32"]
    res = runner.invoke(app, [*args, "--positions", "last", "--out", str(tmp_path), "-q"])
    assert res.exit_code == 0, res.output
    data = json.loads((tmp_path / "depth.json").read_text())
    assert data["schema"] == DEPTH_SCHEMA and data["placement"]["pattern"] == "Post-LN"
    assert data["data"]["positions"] == "last" and data["data"]["positions_averaged"] == 2
    assert data["grad"] is None and (tmp_path / "depth.png").is_file()
    assert "Post-LN in all 3 blocks" in res.output


@pytest.mark.slow
def test_cli_end_to_end_on_a_tiny_model_with_plot_and_compare(checkpoints, tmp_path):
    out = tmp_path / "run"
    args = ["depth", str(checkpoints["llama"]), "--dataset", BUILTIN_CORPUS, "--tokens", "128", "--seq-len", "32"]
    res = runner.invoke(app, [*args, "--grad", "--out", str(out), "-q"])
    assert res.exit_code == 0, res.output
    data = json.loads((out / "depth.json").read_text())
    assert data["schema"] == DEPTH_SCHEMA and data["model"]["num_layers"] == 3
    assert len(data["residual"]["rms"]["mean"]) == 4 and len(data["update"]["relative"]["mean"]) == 3
    assert data["placement"]["labels"] == ["Pre-LN"] * 3 and data["grad"]["loss"] == "next-token"
    assert set(data["sublayers"]) == {"attention", "mlp"} and len(data["grad"]["block"]) == 3
    assert (out / "depth.png").stat().st_size > 10_000 and (out / "depth.pdf").is_file()
    assert "Pre-LN in all 3 blocks" in res.output
    (out / "depth.png").unlink()
    res = runner.invoke(app, ["plot", str(out / "depth.json")])
    assert res.exit_code == 0, res.output
    assert (out / "depth.png").is_file()
    # compare: identical runs pass; a candidate whose residual grows 3× more fails
    res = runner.invoke(app, ["compare", str(out / "depth.json"), str(out / "depth.json"), "--no-plot"])
    assert res.exit_code == 0, res.output
    grown = json.loads((out / "depth.json").read_text())
    grown["residual"]["rms"]["mean"][-1] *= 3
    grown["summary"] = {}
    write_json(tmp_path / "grown.json", grown)
    res = runner.invoke(app, ["compare", str(out / "depth.json"), str(tmp_path / "grown.json"), "--no-plot"])
    assert res.exit_code == 1, res.output
    assert "rms_growth" in res.output


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--positions", "middle"], "Invalid value for '--positions'"),
        (["--tokens", "0"], "--tokens must be positive"),
        (["--batch-size", "0"], "--batch-size must be positive"),
    ],
)
def test_cli_bad_inputs_exit_2(checkpoints, tmp_path, extra, message):
    res = runner.invoke(
        app, ["depth", str(checkpoints["llama"]), "--dataset", BUILTIN_CORPUS, *extra, "--out", str(tmp_path)]
    )
    assert res.exit_code == 2
    assert message in res.output


def test_grad_refuses_an_encoder_without_its_masked_lm_head(checkpoints, tmp_path):
    res = runner.invoke(
        app,
        [
            "depth",
            str(checkpoints["bert"]),
            "--dataset",
            BUILTIN_CORPUS,
            "--tokens",
            "64",
            "--seq-len",
            "32",
            "--grad",
            "--out",
            str(tmp_path),
        ],
    )
    assert res.exit_code == 2
    assert "no trained masked-LM head" in res.output
    assert not (tmp_path / "depth.json").exists()


@pytest.mark.slow
def test_real_minilm_end_to_end(minilm, tmp_path):
    res = runner.invoke(
        app,
        [
            "depth",
            str(minilm),
            "--dataset",
            BUILTIN_CORPUS,
            "--tokens",
            "1024",
            "--seq-len",
            "128",
            "--out",
            str(tmp_path),
            "-q",
        ],
    )
    assert res.exit_code == 0, res.output
    data = json.loads((tmp_path / "depth.json").read_text())
    assert data["placement"]["summary"] == "Post-LN in all 6 blocks"
    assert data["sublayers"]["attention"]["modules"] == ["attention.output.dense"] * 6
    assert data["grad"] is None and data["data"]["positions_averaged"] == 1024
    assert all(v > 0 for v in data["residual"]["rms"]["mean"])
    assert (tmp_path / "depth.png").is_file()
    res = runner.invoke(
        app, ["depth", str(minilm), "--dataset", BUILTIN_CORPUS, "--tokens", "64", "--grad", "--out", str(tmp_path)]
    )
    assert res.exit_code == 2 and "masked-LM head" in res.output


def test_compare_rules_on_depth_results(checkpoints):
    from dataclasses import replace

    from layerprobe.gate import GateRules
    from layerprobe.gate.rules.depth import depth_rules
    from layerprobe.gate.verdict import compare_results
    from layerprobe.model.placement import summarise

    base = run_depth(_spec(checkpoints["llama"], tokens=64))
    same = {r.rule: r for r in depth_rules(base, base, 1.25)}
    assert same["rms_growth"].passed and same["rms_growth"].change == pytest.approx(1.0)
    assert same["placement"].passed and same["placement"].change == 0
    blocks = [replace(b, label="Post-LN") if b.block == 0 else b for b in base.placement.blocks]
    rewired = replace(base, placement=summarise(blocks), summary={})
    verdict = compare_results(base, rewired, GateRules())
    failed = {r.rule: r for r in verdict.results if not r.passed}
    assert set(failed) == {"placement"} and failed["placement"].details["changed_blocks"] == [0]
    assert "Mix-LN, transition at 1" in failed["placement"].message
    grown = replace(base, rms=replace(base.rms, mean=[*base.rms.mean[:-1], base.rms.mean[-1] * 1.3]), summary={})
    growth = {r.rule: r for r in depth_rules(base, grown, 1.25)}["rms_growth"]
    assert not growth.passed and growth.change == pytest.approx(1.3)
    assert {r.rule: r for r in depth_rules(base, grown, 1.5)}["rms_growth"].passed
    other = replace(base, data={**base.data, "positions": "last"})
    assert compare_results(base, other, GateRules()).notes == [
        "data.positions differs: baseline 'all', candidate 'last'"
    ]
