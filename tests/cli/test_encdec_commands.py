"""Every command on T5 and BART, each stack: no traceback, the stack named in every output, every hint tried."""

from __future__ import annotations

import json

import pytest
import transformers as tf
from command_line import assert_one_line_error, flat, invoke, invoke_prune_drop
from factories import ENCDEC_DEPTHS, ENCDEC_FAMILIES, build_encdec_checkpoint

CORPUS = ["--dataset", "builtin:pydoc", "--tokens", "160", "--seq-len", "32", "--device", "cpu"]
STACKS = {"t5": ("encoder.block", "decoder.block"), "bart": ("encoder.layers", "decoder.layers")}
pytestmark = pytest.mark.slow  # each command loads a model and reads a corpus: seconds to a minute each

WITH_HEAD = {"t5": "encoder.block", "bart": "model.encoder.layers"}  # a path written from the model with its head


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("encdec-cli")
    return {family: build_encdec_checkpoint(family, root / family) for family in ENCDEC_FAMILIES}


def assert_clean(result) -> None:
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output and result.exception is None


@pytest.mark.parametrize("family", ENCDEC_FAMILIES)
def test_layers_names_the_stack_and_how_to_reach_the_other(checkpoints, family):
    encoder, decoder = STACKS[family]
    result = invoke("layers", checkpoints[family])
    assert_clean(result)
    text = flat(result.output)
    assert f"stack path: {decoder} (text stack) L = {ENCDEC_DEPTHS['decoder']}" in text
    assert f"decoder stack of an encoder-decoder; the encoder: --layers-path {encoder}" in text
    tried = invoke("layers", checkpoints[family], "--layers-path", encoder)  # the line's own advice
    assert_clean(tried)
    assert f"stack path: {encoder} (text stack) L = {ENCDEC_DEPTHS['encoder']}" in flat(tried.output)


@pytest.mark.parametrize("family", ENCDEC_FAMILIES)
def test_every_command_runs_on_either_stack(checkpoints, family, tmp_path):
    path = checkpoints[family]
    for side, layers_path in (("encoder", WITH_HEAD[family]), ("decoder", None)):
        chosen = ["--layers-path", layers_path] if layers_path else []
        stack_path = STACKS[family][0 if side == "encoder" else 1]
        named = f"· {side} stack {stack_path}"
        for command, name in (("angular", "angular.json"), ("depth", "depth.json")):
            out = tmp_path / f"{command}-{side}"
            result = invoke(command, path, *chosen, *CORPUS, "--out", out, env={"COLUMNS": "250"})
            assert_clean(result)
            assert named in result.output
            model = json.loads((out / name).read_text())["model"]
            assert (model["side"], model["layer_path"], model["num_layers"]) == (side, stack_path, ENCDEC_DEPTHS[side])
        out = tmp_path / f"drop-{side}"
        result = invoke_prune_drop(path, *chosen, "--task", "corpus", *CORPUS, "--out", out)
        assert_clean(result)
        assert named in result.output
        drop = json.loads((out / "prune_drop.json").read_text())
        assert drop["model"]["side"] == side
        assert drop["settings"]["layers"] == list(range(ENCDEC_DEPTHS[side]))
        saved = tmp_path / f"pruned-{side}"
        result = invoke("prune", path, *chosen, "--remove", "0", "--save", saved, env={"COLUMNS": "250"})
        assert_clean(result)
        assert named in result.output
        config = tf.AutoConfig.from_pretrained(saved)
        counts = {"t5": ("num_layers", "num_decoder_layers"), "bart": ("encoder_layers", "decoder_layers")}[family]
        field = counts[0 if side == "encoder" else 1]
        assert getattr(config, field) == ENCDEC_DEPTHS[side] - 1
        other = counts[1 if side == "encoder" else 0]
        assert getattr(config, other) == ENCDEC_DEPTHS["decoder" if side == "encoder" else "encoder"]
        reloaded, info = tf.AutoModelForSeq2SeqLM.from_pretrained(saved, output_loading_info=True)
        assert not info["missing_keys"] and not info["unexpected_keys"], info  # T5: block 0's bias moved on
        assert type(reloaded).__name__ == config.architectures[0]


@pytest.mark.parametrize("family", ENCDEC_FAMILIES)
def test_a_path_that_is_not_a_stack_is_one_line_and_its_hint_works(checkpoints, family, tmp_path):
    result = invoke("angular", checkpoints[family], "--layers-path", "encoder", *CORPUS, "--out", tmp_path)
    assert_one_line_error(result, "is not a stack of", tmp_path)
    hint = result.output.strip().splitlines()[1]
    offered = [part.split()[0] for part in hint.split("--layers-path ")[1:]]
    assert offered == list(STACKS[family])
    for path in offered:  # every path the hint offers is a stack `layers` then lists
        assert_clean(invoke("layers", checkpoints[family], "--layers-path", path))


def test_lm_eval_tasks_are_refused_in_one_line_and_the_hint_runs(checkpoints, tmp_path):
    result = invoke_prune_drop(checkpoints["t5"], "--task", "arc_easy", *CORPUS, "--out", tmp_path)
    assert_one_line_error(result, "is an encoder-decoder", tmp_path)
    assert "Use --task corpus." in result.output
    tried = invoke_prune_drop(checkpoints["t5"], "--task", "corpus", "--layers", "0", *CORPUS, "--out", tmp_path)
    assert_clean(tried)


def test_depth_grad_is_refused_in_one_line_and_the_hint_runs(checkpoints, tmp_path):
    result = invoke("depth", checkpoints["bart"], "--grad", *CORPUS, "--out", tmp_path)
    assert_one_line_error(result, "--grad needs a language-modelling loss", tmp_path)
    assert "Run depth without --grad." in result.output
    assert_clean(invoke("depth", checkpoints["bart"], *CORPUS, "--out", tmp_path))


def test_whisper_is_refused_in_one_line_by_every_command(tmp_path):
    path = tmp_path / "whisper"
    config = tf.WhisperConfig(
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        vocab_size=512,
        architectures=["WhisperForConditionalGeneration"],
    )
    config.save_pretrained(path)
    out = tmp_path / "out"
    for args in (
        ("layers", path),
        ("angular", path, *CORPUS, "--out", out),
        ("depth", path, *CORPUS, "--out", out),
        ("prune-drop", path, "--task", "corpus", *CORPUS, "--out", out),
        ("prune", path, "--remove", "0", "--save", out / "pruned"),
    ):
        result = invoke(*args)
        assert result.exit_code == 2 and "Traceback" not in result.output, (args, result.output)
        lines = result.output.strip().splitlines()
        assert len(lines) == 1 and "encoder reads audio features" in lines[0], (args, result.output)
