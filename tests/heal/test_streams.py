"""`layerprobe heal` on stacks whose blocks do not pass one stream each run: Gemma-3n (AltUp) and mllama.

- Gemma-3n: the linear fold cannot be exact (a test below shows a fold into the down projection does not add
  T·c to the active stream, and changes the other stream), so `--method linear` / `linear+lora` are refused
  from the config, before any weight; `--method lora` (the hint) heals it.
- mllama: removing its image-only (cross-attention) block is refused before any weight (its hint tried);
  a text block's span folds into the last block before it that runs text-only, checked against numpy's
  lstsq on activations the test records itself and the pruned model rebuilt in the test with T applied by
  a hook, in float64.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import transformers as tf
from command_line import assert_one_line_error, invoke
from factories.towers import build_tower_checkpoint, mllama_without, tower_model

from layerprobe.core import BUILTIN_CORPUS, UnsupportedModel
from layerprobe.data import Window
from layerprobe.heal import find_sites, folded
from layerprobe.heal.fold import OUT_IN, FoldSite, FoldTarget, fold_spans
from layerprobe.heal.linear import calibrate, check_fold
from layerprobe.heal.lora import target_modules
from layerprobe.model import find_layers, removed_blocks

CROSS = 2  # the tiny mllama's image-only block (factories.towers.MLLAMA_CROSS), of 4 text blocks
CORPUS = ("--dataset", BUILTIN_CORPUS, "--seq-len", "32", "--tokens", "256", "--held-out-tokens", "128")


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("heal-streams")
    built: dict[str, object] = {}

    def get(family: str):
        if family not in built:
            built[family] = build_tower_checkpoint(family, root / family)
        return built[family]

    return get


@pytest.fixture()
def no_weights(monkeypatch):
    """Every model class's from_pretrained fails (mllama loads through its own class, not an Auto class)."""

    def fail(*_args, **_kwargs):
        raise AssertionError("weights were loaded before the refusal")

    monkeypatch.setattr(tf.PreTrainedModel, "from_pretrained", classmethod(fail))


def test_fold_spans_run_across_the_blocks_a_pass_skips():
    assert fold_spans([2, 3]) == [(2, 4)]
    assert fold_spans([1, 3]) == [(1, 2), (3, 4)]
    assert fold_spans([3], absent=[2]) == [(2, 4)]  # the span opens at the skipped block: block 1 folds
    assert fold_spans([1, 3], absent=[2]) == [(1, 4)]  # one span text-only: 1, (2 skipped), 3
    assert fold_spans([1], absent=[2]) == [(1, 2)]  # a skipped block after the cut is not part of it
    assert fold_spans([4], absent=[1]) == [(4, 5)]


@pytest.mark.slow  # builds two tiny checkpoints (~6 s)
@pytest.mark.parametrize(
    ("family", "args", "message", "hint"),
    [
        ("gemma3n", ("--remove", "1"), "AltUp blocks (Gemma-3n, 2 streams)", "--method lora"),
        ("gemma3n", ("--remove", "1", "--method", "linear+lora"), "no map of the active stream folds", "lora"),
        ("mllama", ("--remove", "2-3"), "Block 2 of 'layers' runs only with an image", "--remove 3."),
        ("mllama", ("--remove", "2", "--method", "lora"), "removing it changes nothing", "Remove text blocks only."),
    ],
)
def test_refusals_are_one_line_before_any_weight(checkpoints, tmp_path, no_weights, family, args, message, hint):
    out = tmp_path / "out"
    result = invoke("heal", checkpoints(family), *args, *CORPUS, "--out", out, "--quiet")
    assert_one_line_error(result, message, out)
    assert hint in result.output.strip().splitlines()[-1], result.output
    assert not (out / "heal.json").exists()


def test_a_fold_into_gemma3n_does_not_add_the_map_to_the_active_stream():
    """Why the fold is refused: folding T into block 0's down projection, as for a Pre-LN block, does not make
    the active stream gain T·c (c: the MLP's output), and it moves the other stream too."""
    model, _ = tower_model("gemma3n")
    model = model.double()
    stack = find_layers(model)
    block = stack.blocks[0]
    seen: dict[str, torch.Tensor] = {}
    handles = [
        block.mlp.register_forward_hook(lambda _m, _a, out: seen.__setitem__("c", out)),
        block.register_forward_hook(lambda _m, _a, out: seen.__setitem__("out", out)),
    ]
    ids = torch.randint(3, 500, (1, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        model(input_ids=ids, use_cache=False)
        before, c = seen["out"].clone(), seen["c"].clone()
        transform = np.random.default_rng(0).normal(0, 0.2, (32, 32))
        site = FoldSite(1, 2, "pre-ln", "mlp", (FoldTarget("mlp.down_proj.weight", OUT_IN),))
        with folded(stack, [site], [transform]):
            model(input_ids=ids, use_cache=False)
    for handle in handles:
        handle.remove()
    active = model.config.altup_active_idx
    change = seen["out"][active] - before[active]
    wanted = c @ torch.as_tensor(transform).T
    assert float((change - wanted).norm() / wanted.norm()) > 0.1
    assert float((seen["out"][1 - active] - before[1 - active]).norm()) > 1e-3


def _ids(seed: int, rows: int = 3, length: int = 16) -> torch.Tensor:
    return torch.randint(3, 500, (rows, length), generator=torch.Generator().manual_seed(seed))


def _records(model, fold_block: int, start: int, end: int, ids: torch.Tensor):
    """(c, x^end − x^start) on every position, by the test's own hooks (x^4: the last block's output)."""
    layers = model.model.language_model.layers
    seen: dict[str, torch.Tensor] = {}

    def first(t):
        return t[0] if isinstance(t, tuple) else t

    def input_of(name):
        return lambda _m, a, k: seen.__setitem__(name, a[0] if a else k["hidden_states"])

    handles = [layers[fold_block].mlp.register_forward_hook(lambda _m, _a, out: seen.__setitem__("c", first(out)))]
    handles.append(layers[start].register_forward_pre_hook(input_of("s"), with_kwargs=True))
    handles.append(layers[-1].register_forward_hook(lambda _m, _a, out: seen.__setitem__("e", first(out))))
    with torch.no_grad():
        model(input_ids=ids, use_cache=False)
    for handle in handles:
        handle.remove()
    return seen["c"].reshape(-1, 32).numpy(), (seen["e"] - seen["s"]).reshape(-1, 32).numpy()


@pytest.mark.slow  # three float64 passes of the tiny mllama and its rebuilt pruned models (~4 s)
@pytest.mark.parametrize(("removed", "fold_block", "first_removed"), [([3], 1, 3), ([1, 3], 0, 1)])
def test_mllama_fold_is_numpy_lstsq_and_equals_the_rebuilt_pruned_model_with_the_map(
    removed, fold_block, first_removed
):
    model, _ = tower_model("mllama")
    model = model.double()
    stack = find_layers(model)
    ids = _ids(1)
    sites = find_sites(model, stack, removed, ids[:1])
    assert [(s.start, s.end, s.block) for s in sites] == [(fold_block + 1, 4, fold_block)]
    windows = [Window(row.tolist(), len(row) - 1) for row in ids]
    equations = calibrate(model, stack, sites, windows, 2, torch.device("cpu"), 32)
    c, y = _records(model, fold_block, first_removed, 4, ids)
    expected, *_ = np.linalg.lstsq(c, y, rcond=None)
    np.testing.assert_allclose(equations[0].solve(), expected.T, rtol=1e-6, atol=1e-8)
    transform = expected.T
    check_fold(model, stack, sites, [transform], ids[:1])  # float64: relative error <= 1e-8
    with torch.no_grad(), folded(stack, sites, [transform]), removed_blocks(stack, removed):
        got = model(input_ids=ids, use_cache=False).logits
    kept = [i for i in range(4) if i not in removed]
    rebuilt = mllama_without(
        model, kept
    ).double()  # T applied by a hook on block fold_block's output: + T·(its MLP output)
    layer = rebuilt.model.language_model.layers[kept.index(fold_block)]
    seen: dict[str, torch.Tensor] = {}
    t = torch.as_tensor(transform)
    handles = [
        layer.mlp.register_forward_hook(lambda _m, _a, out: seen.__setitem__("c", out)),
        layer.register_forward_hook(
            lambda _m, _a, out: (
                (out[0] + seen["c"] @ t.T, *out[1:]) if isinstance(out, tuple) else out + seen["c"] @ t.T
            )
        ),
    ]
    with torch.no_grad():
        reference = rebuilt(input_ids=ids, use_cache=False).logits
    for handle in handles:
        handle.remove()
    torch.testing.assert_close(got, reference, rtol=1e-9, atol=1e-9)
    with torch.no_grad():
        assert not torch.allclose(rebuilt(input_ids=ids, use_cache=False).logits, reference)  # the map did work


def test_lora_adapts_no_block_a_text_only_pass_skips():
    model, _ = tower_model("mllama")
    stack = find_layers(model)
    names = target_modules(stack, [3], "all-linear", "")
    assert names and not any(f"layers.{CROSS}." in n or "layers.3." in n for n in names)
    assert any("layers.1." in n for n in names)


@pytest.mark.slow  # two heal runs of tiny models (~20 s)
def test_the_hints_heal(checkpoints, tmp_path):
    """Gemma-3n's hint (--method lora) and mllama's (--remove 3, a text block, linear) both heal, end to end."""
    gemma = invoke(
        "heal", checkpoints("gemma3n"), "--remove", "1", "--method", "lora", "--steps", "2", *CORPUS,
        "--out", tmp_path / "gemma", "--quiet",
    )  # fmt: skip
    assert gemma.exit_code == 0, gemma.output
    record = json.loads((tmp_path / "gemma" / "heal.json").read_text())
    assert record["method"] == "lora" and record["removed"] == [1] and record["fits"] == []
    assert record["model"]["stream"].startswith("AltUp stream 0 of 2")
    mllama = invoke(
        "heal", checkpoints("mllama"), "--remove", "3", *CORPUS, "--save", tmp_path / "healed",
        "--out", tmp_path / "mllama", "--quiet",
    )  # fmt: skip
    assert mllama.exit_code == 0, mllama.output
    record = json.loads((tmp_path / "mllama" / "heal.json").read_text())
    assert [(f["start"], f["end"], f["fold_block"]) for f in record["fits"]] == [(2, 4, 1)]
    saved = json.loads((tmp_path / "healed" / "config.json").read_text())["text_config"]
    assert saved["num_hidden_layers"] == 3 and saved["cross_attention_layers"] == [CROSS]
    # the fold is saved under the checkpoint class's own names: block 1's down projection, and nothing else
    source = tf.MllamaForConditionalGeneration.from_pretrained(checkpoints("mllama")).state_dict()
    healed = tf.MllamaForConditionalGeneration.from_pretrained(tmp_path / "healed").state_dict()
    changed = sorted(n for n in healed if not torch.equal(healed[n], source[n]))
    assert changed == ["model.language_model.layers.1.mlp.down_proj.weight"]


def test_find_sites_is_not_reached_for_gemma3n_but_would_refuse():
    """The library call, past the CLI's config check, refuses too (one line, no wrong fold)."""
    model, _ = tower_model("gemma3n")
    with pytest.raises(UnsupportedModel):
        find_sites(model, find_layers(model), [1], _ids(2)[:1])
