"""Loading options (--model-args, --load-in-4bit/8bit, --attn-implementation) and models spread by --device-map.

The device_map tests run on CPU: `--model-args max_memory={cpu:...},offload_folder=...` makes accelerate
keep some blocks' weights on disk and attach its AlignDevicesHook to every block, which is the code path a
70B model spread over GPUs takes (weights where the hook says, inputs moved at each call). Scores must be
those of the plain model loaded on one device, from the simple engine (lm-eval's own path).
"""

from __future__ import annotations

import copy
import importlib.util
import json
from pathlib import Path

import pytest
import torch
import transformers as tf
from typer.testing import CliRunner

from layerprobe.cli.app import app
from layerprobe.core import (
    BUILTIN_CORPUS,
    CorpusSpec,
    ModelSpec,
    PruneSpec,
    parse_memory_size,
    parse_model_args,
)
from layerprobe.core.errors import LayerprobeError, ResultError
from layerprobe.data import build_windows, iter_documents
from layerprobe.measure import distance as distance_module
from layerprobe.measure.angular import measure
from layerprobe.model import load_model, module_device
from layerprobe.model.stack import find_layers
from layerprobe.plots.delta import prune_drop_figure
from layerprobe.plots.heatmap import angular_figure
from layerprobe.prune.state import PruneState, fingerprint
from layerprobe.results import AngularResult, ModelInfo, PruneDropResult, load_result
from layerprobe.results.evaluation import Evaluation

TASKS_DIR = Path(__file__).parents[1] / "data" / "tasks"
runner = CliRunner()
HAVE_BNB = importlib.util.find_spec("bitsandbytes") is not None


def offload_args(tmp_path: Path, cpu_bytes: str = "400KB") -> str:
    """--model-args that make accelerate put the tiny llama's last blocks on disk (hooks on every block)."""
    return f"max_memory={{cpu:{cpu_bytes}}},offload_folder={tmp_path / 'offload'}"


def one_line_error(result, *needles: str) -> None:
    assert result.exit_code == 2, result.output
    assert "error:" in result.output
    for needle in needles:
        assert needle in result.output, result.output


# ------------------------------------------------------------------------------------------ parsing
def test_model_args_parse_like_lm_eval_with_mappings():
    parsed = parse_model_args(
        "low_cpu_mem_usage=true,use_safetensors=False,x=3,y=0.5,z=none,name=sdpa,"
        'max_memory={0:20GiB,1:"20GiB",cpu:60GiB},q="quoted"'
    )
    assert parsed == {
        "low_cpu_mem_usage": True,
        "use_safetensors": False,
        "x": 3,
        "y": 0.5,
        "z": None,
        "name": "sdpa",
        "max_memory": {0: "20GiB", 1: "20GiB", "cpu": "60GiB"},
        "q": "quoted",
    }
    assert isinstance(parsed["x"], int) and isinstance(parsed["y"], float)
    assert parse_model_args(None) == {} and parse_model_args("  ") == {}


@pytest.mark.parametrize(
    "text, needle",
    [("novalue", "Cannot read"), ("a=1,a=2", "twice"), ("m={0:1", "Unbalanced"), ("m=0:1}", "Unbalanced")],
)
def test_model_args_mistakes_are_clear_errors(text, needle):
    with pytest.raises(LayerprobeError, match=needle):
        parse_model_args(text)


def test_memory_sizes():
    assert parse_memory_size("512MiB") == 512 * 2**20
    assert parse_memory_size("2GiB") == 2 * 2**30
    assert parse_memory_size("1.5GB") == 1_500_000_000
    assert parse_memory_size("4096") == 4096
    assert parse_memory_size(None) is None
    for bad in ("lots", "0", "-1GiB", "2 parsecs"):
        with pytest.raises(LayerprobeError):
            parse_memory_size(bad)


@pytest.mark.parametrize("key", ["dtype", "torch_dtype", "device_map", "revision", "trust_remote_code", "device"])
def test_model_args_that_duplicate_an_option_are_refused(key):
    with pytest.raises(LayerprobeError, match=key):
        ModelSpec("m", model_args={key: "x"})


def test_attn_implementation_has_one_home():
    spec = ModelSpec("m", model_args={"attn_implementation": "eager", "low_cpu_mem_usage": True})
    assert spec.attn_implementation == "eager" and spec.model_args == {"low_cpu_mem_usage": True}
    with pytest.raises(LayerprobeError, match="given twice"):
        ModelSpec("m", model_args={"attn_implementation": "eager"}, attn_implementation="sdpa")
    with pytest.raises(LayerprobeError, match="attn-implementation"):
        ModelSpec("m", attn_implementation="fast_please")


# -------------------------------------------------------------------------------- CLI refusals, exit 2
@pytest.mark.parametrize(
    "extra, needles",
    [
        (["--load-in-4bit", "--load-in-8bit"], ["--load-in-4bit and --load-in-8bit"]),
        (["--model-args", "dtype=float16"], ["'dtype'", "--dtype"]),
        (["--model-args", "device_map=auto"], ["'device_map'", "--device-map"]),
        (["--model-args", "revision=main"], ["--revision"]),
        (["--model-args", "trust_remote_code=true"], ["--trust-remote-code"]),
        (["--model-args", "load_in_4bit=true"], ["--load-in-4bit"]),
        (["--max-state-memory", "lots"], ["--max-state-memory"]),
    ],
)
@pytest.mark.parametrize("command", ["angular", "prune-drop"])
def test_conflicting_loading_options_exit_2(tiny_checkpoints, tmp_path, command, extra, needles):
    task = ["--task", "lp_arc_like", "--include-path", str(TASKS_DIR)] if command == "prune-drop" else []
    result = runner.invoke(app, [command, str(tiny_checkpoints["llama"]), *task, *extra, "--out", str(tmp_path)])
    one_line_error(result, *needles)
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("flag", ["--load-in-4bit", "--load-in-8bit"])
@pytest.mark.parametrize("command", ["angular", "prune-drop"])
def test_quantization_without_bitsandbytes_is_one_error_before_any_weight(
    tiny_checkpoints, tmp_path, monkeypatch, command, flag
):
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "bitsandbytes" else real_find_spec(name, *a)
    )
    reads: list[str] = []
    real_load = tf.PreTrainedModel.from_pretrained.__func__

    def watched(cls, *args, **kwargs):
        reads.append(cls.__name__)
        return real_load(cls, *args, **kwargs)

    monkeypatch.setattr(tf.PreTrainedModel, "from_pretrained", classmethod(watched))
    task = ["--task", "lp_arc_like", "--include-path", str(TASKS_DIR)] if command == "prune-drop" else []
    result = runner.invoke(app, [command, str(tiny_checkpoints["llama"]), *task, flag, "--out", str(tmp_path)])
    one_line_error(result, flag, "bitsandbytes", "pip install 'layerprobe[quant]'")
    assert reads == []  # refused before a single weight was read


@pytest.mark.skipif(HAVE_BNB, reason="bitsandbytes is installed here")
def test_quantization_error_in_this_environment(tiny_checkpoints, tmp_path):
    result = runner.invoke(app, ["angular", str(tiny_checkpoints["llama"]), "--load-in-4bit", "--out", str(tmp_path)])
    one_line_error(result, "pip install 'layerprobe[quant]'")


def test_unknown_model_arg_is_a_clear_error(tiny_checkpoints, tmp_path):
    result = runner.invoke(
        app,
        ["angular", str(tiny_checkpoints["llama"]), "--model-args", "no_such_keyword=1", "--dataset", BUILTIN_CORPUS]
        + ["--tokens", "64", "--quiet", "--out", str(tmp_path)],
    )
    one_line_error(result, "--model-args")


# ------------------------------------------------------------------------ what reaches from_pretrained
def test_options_reach_from_pretrained_and_the_result(tiny_checkpoints, tmp_path, monkeypatch):
    seen: list[dict] = []
    real_load = tf.PreTrainedModel.from_pretrained.__func__

    def watched(cls, *args, **kwargs):
        seen.append(copy.deepcopy({k: v for k, v in kwargs.items() if k != "config"}))
        return real_load(cls, *args, **kwargs)

    monkeypatch.setattr(tf.PreTrainedModel, "from_pretrained", classmethod(watched))
    out = tmp_path / "out"
    result = runner.invoke(
        app,
        ["angular", str(tiny_checkpoints["llama"]), "--model-args", "low_cpu_mem_usage=true,use_safetensors=true"]
        + ["--attn-implementation", "eager", "--device", "cpu", "--dataset", BUILTIN_CORPUS, "--tokens", "128"]
        + ["--seq-len", "64", "--quiet", "--out", str(out)],
    )
    assert result.exit_code == 0, result.output
    assert len(seen) == 1
    assert seen[0]["low_cpu_mem_usage"] is True and seen[0]["use_safetensors"] is True
    assert seen[0]["attn_implementation"] == "eager"
    assert "quantization_config" not in seen[0]
    model = json.loads((out / "angular.json").read_text())["model"]
    assert model["model_args"] == {"low_cpu_mem_usage": True, "use_safetensors": True}
    assert model["attn_implementation"] == "eager"
    assert model["quantization"] is None


def test_attention_implementations_agree(tiny_checkpoints):
    """eager and sdpa are two kernels of one function: the distances they give must agree."""
    spec = CorpusSpec(BUILTIN_CORPUS, None, "train", "text", 512, 64)
    results = {}
    for attn in ("eager", "sdpa"):
        loaded = load_model(
            ModelSpec(str(tiny_checkpoints["llama"]), device="cpu", attn_implementation=attn), purpose="base"
        )
        assert loaded.attn_implementation == attn
        assert loaded.model.config._attn_implementation == attn
        windows = build_windows(loaded.tokenizer, iter_documents(spec), spec.tokens, spec.seq_len)
        results[attn] = torch.tensor(measure(loaded, find_layers(loaded.model), windows, "all", 4).result())
    torch.testing.assert_close(results["eager"], results["sdpa"], atol=1e-5, rtol=0)


def test_quantized_load_builds_a_bitsandbytes_config():
    """The keywords a quantized load gets (bitsandbytes itself needs a GPU: only the config is checked)."""
    from layerprobe.model.load_options import from_pretrained_kwargs

    kwargs = from_pretrained_kwargs(ModelSpec("m", quantization="4bit"), torch.bfloat16, torch.device("cpu"))
    config = kwargs["quantization_config"]
    assert config.load_in_4bit and not config.load_in_8bit
    assert config.bnb_4bit_quant_type == "nf4" and config.bnb_4bit_compute_dtype == torch.bfloat16
    assert kwargs["device_map"] == {"": "cpu"}  # bitsandbytes models cannot be moved after loading
    kwargs = from_pretrained_kwargs(ModelSpec("m", quantization="8bit", device_map="auto"), torch.float16, None)
    assert kwargs["quantization_config"].load_in_8bit and kwargs["device_map"] == "auto"


# ------------------------------------------------------------------------------ provenance and labels
def _model_info(**overrides) -> ModelInfo:
    base = dict(
        id="org/m",
        revision=None,
        commit="abc",
        architecture="LlamaForCausalLM",
        model_type="llama",
        kind="causal-lm",
        dtype="bfloat16",
        num_layers=2,
        layer_path="layers",
        block_class="LlamaDecoderLayer",
    )
    return ModelInfo(**{**base, **overrides})


def test_old_results_without_loading_fields_still_read(tiny_checkpoints, tmp_path):
    result = runner.invoke(
        app,
        ["angular", str(tiny_checkpoints["gpt2"]), "--dataset", BUILTIN_CORPUS, "--tokens", "128", "--seq-len", "64"]
        + ["--device", "cpu", "--quiet", "--out", str(tmp_path)],
    )
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "angular.json").read_text())
    for key in ("quantization", "attn_implementation", "model_args"):
        del data["model"][key]
    (tmp_path / "old.json").write_text(json.dumps(data))
    old = load_result(tmp_path / "old.json")
    assert old.model.quantization is None and old.model.model_args == {} and old.model.attn_implementation is None
    assert old.model.label == old.model.id


def test_quantized_results_are_labelled(tiny_checkpoints, tmp_path):
    result = runner.invoke(
        app,
        ["angular", str(tiny_checkpoints["gpt2"]), "--dataset", BUILTIN_CORPUS, "--tokens", "128", "--seq-len", "64"]
        + ["--device", "cpu", "--quiet", "--out", str(tmp_path)],
    )
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "angular.json").read_text())
    data["model"]["quantization"] = "bitsandbytes-4bit-nf4"
    quantized = AngularResult.from_dict(data)
    assert quantized.to_dict()["model"]["quantization"] == "bitsandbytes-4bit-nf4"
    assert "(bitsandbytes-4bit-nf4)" in quantized.model.label
    assert "bitsandbytes-4bit-nf4" in angular_figure(quantized).axes[0].get_title()
    plain = load_result(tmp_path / "angular.json")
    assert "bitsandbytes" not in angular_figure(plain).axes[0].get_title()

    from layerprobe.cli.console import out
    from layerprobe.cli.summaries import print_angular_summary

    with out.capture() as captured:
        print_angular_summary(quantized)
    assert "bitsandbytes-4bit-nf4" in captured.get()


def test_fingerprint_separates_loading_options(tmp_path):
    spec = PruneSpec(model=ModelSpec("org/m"), tasks=("lp_arc_like",))
    plain = fingerprint(spec, _model_info())
    for changed in (
        _model_info(quantization="bitsandbytes-4bit-nf4"),
        _model_info(attn_implementation="eager"),
        _model_info(model_args={"max_memory": {"0": "20GiB"}}),
    ):
        other = fingerprint(spec, changed)
        assert other != plain
        state = PruneState.open(tmp_path / "run", plain, resume=False)
        state.record("lp_arc_like", None, Evaluation(metrics={}, num_fewshot=0, samples=1, engine="simple"))
        with pytest.raises(ResultError):
            PruneState.open(tmp_path / "run", other, resume=True)
        state.remove()
    bounded = PruneSpec(model=ModelSpec("org/m"), tasks=("lp_arc_like",), max_state_bytes=2**20)
    assert fingerprint(bounded, _model_info()) != plain


# --------------------------------------------------------------------------- models over devices (item 4)
def _prune(args: list[str], out: Path):
    result = runner.invoke(
        app,
        ["prune-drop", *args, "--task", "lp_pydoc_ppl", "--include-path", str(TASKS_DIR)]
        + ["--limit", "2", "--num-fewshot", "1", "--batch-size", "4", "--layers", "0,2,3", "--dtype", "float32"]
        + ["--quiet", "--out", str(out)],
    )
    assert result.exit_code == 0, result.output
    return PruneDropResult.from_dict(json.loads((out / "prune_drop.json").read_text()))


def _assert_same_scores(got: PruneDropResult, want: PruneDropResult) -> None:
    assert got.tasks.keys() == want.tasks.keys()
    for name, task in want.tasks.items():
        for metric, drop in task.metrics.items():
            other = got.tasks[name].metrics[metric]
            assert other.layers == drop.layers
            assert other.baseline == pytest.approx(drop.baseline, rel=1e-5, abs=1e-6), (name, metric)
            assert other.pruned == pytest.approx(drop.pruned, rel=1e-5, abs=1e-6), (name, metric)


def test_offloaded_model_has_hooks_and_devices(tiny_checkpoints, tmp_path):
    spec = ModelSpec(
        str(tiny_checkpoints["llama"]),
        device_map="auto",
        dtype="float32",
        model_args=parse_model_args(offload_args(tmp_path)),
    )
    loaded = load_model(spec, purpose="head")
    blocks = find_layers(loaded.model).blocks
    placed = loaded.model.hf_device_map
    assert "disk" in placed.values() and "cpu" in placed.values()  # really split: some weights not in memory
    assert all(type(getattr(b, "_hf_hook", None)).__name__ == "AlignDevicesHook" for b in blocks)
    offloaded = [b for b in blocks if next(b.parameters()).device.type == "meta"]
    assert offloaded  # weights on meta, brought in by the hook at each call
    assert all(module_device(b) == torch.device("cpu") for b in blocks)  # where they compute, not "meta"
    assert loaded.input_device == torch.device("cpu")
    assert spec.model_args["max_memory"] == {"cpu": "400KB"}  # accelerate rewrites its copy, not the spec's


def _reference_loglikelihood(model, context: list[int], continuation: list[int]) -> float:
    ids = torch.tensor([context + continuation])
    with torch.no_grad():
        logprobs = model(input_ids=ids).logits[0].double().log_softmax(-1)
    start = len(context)
    return float(sum(logprobs[start + k - 1, token] for k, token in enumerate(continuation)))


def test_shared_engine_on_offloaded_blocks_matches_physically_deleted_models(tiny_checkpoints, tmp_path):
    """Hooks on every block, two blocks' weights on disk: every variant's log-likelihoods are a fresh
    model's without that block (reference: weights remapped into an (L-1)-layer model, no hooks)."""
    from reference import physically_deleted

    from layerprobe.evaluate.shared import SharedPrefixLM

    path = tiny_checkpoints["llama"]
    spec = ModelSpec(str(path), device_map="auto", dtype="float32", model_args=parse_model_args(offload_args(tmp_path)))
    loaded = load_model(spec, purpose="head")
    stack = find_layers(loaded.model)
    assert any(next(b.parameters()).device.type == "meta" for b in stack.blocks)
    layers = [0, 2, 3]
    lm = SharedPrefixLM(loaded.model, loaded.tokenizer, stack, layers, batch_size=2)
    encode = loaded.tokenizer.encode
    pairs = [
        (encode("The quick brown fox"), encode(" jumps over")),
        (encode("import os"), encode(" and sys")),
        (encode("A list is a mutable sequence of"), encode(" items")),
    ]
    requests = [(None, context, continuation) for context, continuation in pairs]
    for layer in [None, *layers]:
        lm.active = layer
        got = [ll for ll, _ in lm._loglikelihood_tokens(requests)]
        reference = (
            tf.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
            if layer is None
            else physically_deleted(path, "llama", layer)
        )
        want = [_reference_loglikelihood(reference, c, t) for c, t in pairs]
        assert got == pytest.approx(want, abs=1e-4), layer


@pytest.mark.slow
def test_shared_engine_under_device_map_equals_simple_engine(tiny_checkpoints, tmp_path):
    model = str(tiny_checkpoints["llama"])
    simple = _prune([model, "--engine", "simple", "--device", "cpu"], tmp_path / "simple")
    shared = _prune(
        [model, "--engine", "shared", "--device-map", "auto", "--model-args", offload_args(tmp_path)],
        tmp_path / "shared",
    )
    assert simple.engine == "simple" and shared.engine == "shared"  # not switched off by --device-map
    assert shared.run.device == "device_map=auto"
    assert shared.model.model_args["offload_folder"] == str(tmp_path / "offload")
    _assert_same_scores(shared, simple)


def test_shared_engine_state_bound_splits_batches_with_same_scores(tiny_checkpoints, tmp_path):
    """--max-state-memory bounds the recorded states: with room for one row, every baseline pass is one row."""
    model = str(tiny_checkpoints["llama"])
    rows_seen: list[int] = []
    loaded = load_model(ModelSpec(model, device="cpu", dtype="float32"), purpose="head")
    handle = (
        find_layers(loaded.model)
        .blocks[0]
        .register_forward_pre_hook(lambda _m, args: rows_seen.append(int(args[0].shape[0])))
    )
    from layerprobe.prune.drop import run_prune_drop

    def spec(**extra):
        return PruneSpec(
            model=ModelSpec(model, device="cpu", dtype="float32"),
            tasks=("lp_pydoc_ppl",),
            layers="0,3",
            limit=2,
            batch_size=4,
            include_path=str(TASKS_DIR),
            engine="shared",
            **extra,
        )

    try:
        free = run_prune_drop(spec(), tmp_path / "free", loaded=loaded)
        assert max(rows_seen) > 1
        rows_seen.clear()
        bounded = run_prune_drop(spec(max_state_bytes=1), tmp_path / "bounded", loaded=loaded)
    finally:
        handle.remove()
    assert rows_seen and max(rows_seen) == 1
    assert bounded.settings["max_state_bytes"] == 1
    _assert_same_scores(bounded, free)


def test_angular_under_device_map_equals_one_device(tiny_checkpoints, tmp_path):
    common = ["--dataset", BUILTIN_CORPUS, "--tokens", "512", "--seq-len", "64", "--dtype", "float32", "--quiet"]
    model = str(tiny_checkpoints["llama"])
    plain = runner.invoke(app, ["angular", model, "--device", "cpu", *common, "--out", str(tmp_path / "a")])
    spread = runner.invoke(
        app,
        ["angular", model, "--device-map", "auto", "--model-args", offload_args(tmp_path), "--max-state-memory"]
        + ["4KiB", *common, "--out", str(tmp_path / "b")],
    )
    assert plain.exit_code == 0 and spread.exit_code == 0, plain.output + spread.output
    a, b = (load_result(tmp_path / d / "angular.json") for d in ("a", "b"))
    torch.testing.assert_close(torch.tensor(b.distance), torch.tensor(a.distance), atol=1e-5, rtol=0)
    assert b.run.device == "device_map=auto"


def test_angular_gathers_at_most_the_bound(tiny_checkpoints, monkeypatch):
    """Each slice of states the accumulator upcasts onto its device stays within max_state_bytes."""
    loaded = load_model(ModelSpec(str(tiny_checkpoints["llama"]), device="cpu", dtype="float32"), purpose="base")
    stack = find_layers(loaded.model)
    spec = CorpusSpec(BUILTIN_CORPUS, None, "train", "text", 512, 64)
    windows = build_windows(loaded.tokenizer, iter_documents(spec), spec.tokens, spec.seq_len)
    hidden = loaded.model.config.hidden_size
    bound = 10 * (stack.num_layers + 1) * hidden * 4  # ten positions at every depth, in fp32
    free = measure(loaded, stack, windows, "all", 4)
    slices: list[int] = []
    distances = distance_module._distances

    def watched(unit):
        slices.append(unit.shape[0])
        return distances(unit)

    monkeypatch.setattr(distance_module, "_distances", watched)
    bounded = measure(loaded, stack, windows, "all", 4, max_state_bytes=bound)
    assert max(slices) == 10 and sum(slices) == bounded.count == 512
    torch.testing.assert_close(torch.tensor(bounded.result()), torch.tensor(free.result()), atol=1e-6, rtol=0)
    # the standard errors treat each window as one sample however it is sliced
    torch.testing.assert_close(torch.tensor(bounded.stderr()), torch.tensor(free.stderr()), atol=1e-6, rtol=0)


def test_prune_drop_figure_title_marks_quantization():
    from layerprobe.results import MetricDrop, RunInfo, TaskDrop

    drop = MetricDrop(0.5, 0.1, True, [0, 1], [0.4, 0.45], [0.1, 0.1])
    run = RunInfo("2026-01-01T00:00:00+00:00", 1.0, {}, "cpu")
    task = {"lp_arc_like": TaskDrop({"acc": drop}, 0, None, 10)}
    plain = PruneDropResult(_model_info(), "shared", {}, task, run)
    labelled = PruneDropResult(_model_info(quantization="bitsandbytes-8bit"), "shared", {}, task, run)
    assert "bitsandbytes-8bit" in prune_drop_figure(labelled, "lp_arc_like").axes[0].get_title()
    assert "bitsandbytes" not in prune_drop_figure(plain, "lp_arc_like").axes[0].get_title()
