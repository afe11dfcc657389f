"""Vision and dual-tower checkpoints: each stack found, named by its tower, traced, measured on images, or
refused in one line whose hint works (issue 25)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from command_line import flat, invoke
from factories.towers import build_tower_checkpoint, tower_model, write_image_folder

ANGULAR = "angular.json"


@pytest.fixture(scope="module")
def towers(tmp_path_factory):
    """Tiny checkpoints of the tower families (built on first use) and a folder of six images."""
    root = tmp_path_factory.mktemp("towers")
    built: dict[str, object] = {"images": write_image_folder(root / "images")}

    def get(family: str):
        if family not in built:
            built[family] = build_tower_checkpoint(family, root / family)
        return built[family]

    return get


def _one_line_error(result, message: str) -> str:
    """Exit 2, one `error:` line holding `message` and a `hint:` line; returns the hint."""
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = result.output.strip().splitlines()
    assert lines[0].startswith("error: ") and message in lines[0], result.output
    assert len(lines) == 2 and lines[1].startswith("hint: "), result.output
    return lines[1]


def _angular(*args):
    return invoke("angular", *args, "--tokens", "64", "--seq-len", "16", "--batch-size", "2")


# ------------------------------------------------------------------ numbers: a vision tower against float64
def test_vit_angular_on_images_matches_float64_hooks(towers, tmp_path):
    """ViT on an image folder: every distance equals arccos(cos)/π of float64 states read by hooks."""
    import transformers as tf

    vit, images = towers("vit"), towers("images")
    result = _angular(vit, "--dataset", images, "--out", tmp_path, "--dtype", "float32")
    assert result.exit_code == 0, result.output
    record = json.loads((tmp_path / ANGULAR).read_text())
    assert record["model"]["stack_role"] == "vision"
    # 64 patches at 16 per 32×32 image: 4 images, each measured with its CLS (17 positions)
    assert record["data"]["images"] == 4 and record["data"]["positions_per_image"] == 17
    assert record["data"]["tokens"] == 68

    model = tf.ViTModel.from_pretrained(vit, dtype=torch.float64).eval()
    processor = tf.AutoImageProcessor.from_pretrained(vit)
    from PIL import Image

    files = sorted(images.iterdir())[:4]
    pixels = processor(images=[Image.open(f).convert("RGB") for f in files], return_tensors="pt")["pixel_values"]
    states: list[torch.Tensor] = []
    hooks = [block.register_forward_pre_hook(lambda _m, a: states.append(a[0])) for block in model.layers]
    hooks.append(model.layers[-1].register_forward_hook(lambda _m, _a, out: states.append(out)))
    with torch.no_grad():
        model(pixel_values=pixels.double())
    for hook in hooks:
        hook.remove()
    x = torch.stack(states)  # (L+1, images, positions, hidden)
    unit = x / x.norm(dim=-1, keepdim=True)
    cos = torch.einsum("ibph,jbph->bpij", unit, unit).clamp(-1, 1)
    reference = (torch.arccos(cos) / math.pi).mean(dim=(0, 1)).numpy()
    np.fill_diagonal(reference, 0)
    assert np.allclose(np.array(record["distance"]), reference, atol=1e-5)


# ------------------------------------------------------------------ layers: no traceback, the tower named
@pytest.mark.slow
@pytest.mark.parametrize(
    ("family", "args", "shown"),
    [
        ("vit", (), "layers (vision stack)"),
        ("clip", (), "text_model.encoder.layers (text stack)"),
        ("clip", ("--layers-path", "vision_model.encoder.layers"), "vision_model.encoder.layers (vision stack)"),
        ("siglip", (), "text_model.encoder.layers (text stack)"),
        ("siglip", ("--layers-path", "vision_model.encoder.layers"), "vision_model.encoder.layers (vision stack)"),
        ("paligemma", ("--layers-path", "vision_tower.encoder.layers"), "vision_tower.encoder.layers (vision stack)"),
    ],
)
def test_layers_traces_each_tower(towers, family, args, shown):
    result = invoke("layers", towers(family), *args, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output and "warning" not in result.output
    assert shown in flat(result.output)
    assert "placement: Pre-LN in all" in result.output


@pytest.mark.slow
def test_layers_on_mllama_describes_the_stack_and_says_why_placement_is_missing(towers):
    """Its cross-attention block 2 runs only with an image: described, with the reason (was a KeyError)."""
    result = invoke("layers", towers("mllama"), env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "block(s) 2 did not run on input_ids alone" in flat(result.output)
    assert "vision stacks (--layers-path): vision_model.transformer.layers" in flat(result.output)


def test_text_tracing_never_draws_an_image_token():
    """A VLM's random trace ids avoid the ids its config reserves for images (PaliGemma crashed on them)."""
    from layerprobe.model import find_layers
    from layerprobe.model.towers import image_token_ids, trace_inputs

    model, _ = tower_model("paligemma", vocab_size=40)
    model = model.model
    assert model.config.image_token_index in image_token_ids(model.config)
    stack = find_layers(model)
    for token in range(3):  # whichever id the config reserves
        model.config.image_token_index = token
        ids = trace_inputs(model, stack, 40, (2, 16))["input_ids"]
        assert not (ids == token).any()
        assert ids.max() < 40


# ------------------------------------------------------------------ angular: refusals whose hints work
@pytest.mark.slow
def test_vit_on_text_is_refused_and_the_hint_works(towers, tmp_path):
    hint = _one_line_error(_angular(towers("vit"), "--dataset", "builtin:pydoc", "--out", tmp_path), "reads images")
    assert "folder of images" in hint
    assert _angular(towers("vit"), "--dataset", towers("images"), "--out", tmp_path).exit_code == 0


@pytest.mark.slow
def test_clip_text_tower_by_default_vision_tower_by_path(towers, tmp_path):
    """The default rule picks the text tower; a folder of images names the vision path that reads it."""
    clip, images = towers("clip"), towers("images")
    text = _angular(clip, "--dataset", "builtin:pydoc", "--out", tmp_path / "text")
    assert text.exit_code == 0, text.output
    model = json.loads((tmp_path / "text" / ANGULAR).read_text())["model"]
    assert (model["layer_path"], model["stack_role"], model["num_layers"]) == ("text_model.encoder.layers", "text", 3)

    hint = _one_line_error(_angular(clip, "--dataset", images, "--out", tmp_path / "x"), "reads text")
    assert hint == "hint: Measure its vision tower on the images: --layers-path vision_model.encoder.layers"
    vision = _angular(
        clip, "--dataset", images, "--layers-path", "vision_model.encoder.layers", "--out", tmp_path / "v"
    )
    assert vision.exit_code == 0, vision.output
    model = json.loads((tmp_path / "v" / ANGULAR).read_text())["model"]
    assert (model["layer_path"], model["stack_role"], model["num_layers"]) == (
        "vision_model.encoder.layers",
        "vision",
        4,
    )


@pytest.mark.slow
def test_siglip_and_paligemma_vision_towers_measure_images(towers, tmp_path):
    for family, path in (("siglip", "vision_model.encoder.layers"), ("paligemma", "vision_tower.encoder.layers")):
        out = tmp_path / family
        result = _angular(towers(family), "--dataset", towers("images"), "--layers-path", path, "--out", out)
        assert result.exit_code == 0, result.output
        record = json.loads((out / ANGULAR).read_text())
        assert record["model"]["stack_role"] == "vision" and record["model"]["layer_path"] == path
        assert record["data"]["positions_per_image"] == 16  # SigLIP has no CLS token


@pytest.mark.slow
def test_mllama_language_model_is_measured_text_only_and_its_vision_encoder_on_images(towers, tmp_path):
    """Its cross-attention block runs only with an image ("Block 2 ran 0 times" before): named, skipped."""
    mllama = towers("mllama")
    result = _angular(mllama, "--dataset", "builtin:pydoc", "--out", tmp_path / "text")
    assert result.exit_code == 0, result.output
    assert "Block 2 of 'layers' is a cross-attention block that runs only with an image" in flat(result.output)
    assert "non-finite" not in result.output and "could not be measured" not in result.output
    assert json.loads((tmp_path / "text" / ANGULAR).read_text())["model"]["skipped_blocks"] == [2]
    result = _angular(
        mllama, "--layers-path", "vision_model.transformer.layers", "--dataset", towers("images"), "--out", tmp_path
    )
    assert result.exit_code == 0, result.output


@pytest.mark.slow
def test_gemma3n_altup_streams_are_measured_on_the_active_stream_and_say_so(towers, tmp_path):
    result = _angular(towers("gemma3n"), "--dataset", "builtin:pydoc", "--out", tmp_path)
    assert result.exit_code == 0, result.output
    assert "Measuring AltUp stream 0 of 2 (altup_active_idx)" in flat(result.output)
    record = json.loads((tmp_path / ANGULAR).read_text())
    assert record["model"]["stream"].startswith("AltUp stream 0 of 2")


def test_a_folder_without_images_is_one_line(towers, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    hint = _one_line_error(_angular(towers("vit"), "--dataset", empty, "--out", tmp_path / "o"), "holds no image files")
    assert "folder of images" in hint


# ------------------------------------------------------------------ prune: the named tower, its sub-config
@pytest.mark.slow
def test_prune_clip_vision_tower_rewrites_vision_config_and_reloads(towers, tmp_path):
    """Blocks of the vision tower go, vision_config says so, the text tower is untouched (was refused)."""
    clip, save = towers("clip"), tmp_path / "pruned"
    path = "vision_model.encoder.layers"
    result = invoke("prune", clip, "--layers-path", path, "--remove", "1", "--save", save)
    assert result.exit_code == 0, result.output
    config = json.loads((save / "config.json").read_text())
    assert (config["vision_config"]["num_hidden_layers"], config["text_config"]["num_hidden_layers"]) == (3, 3)
    record = json.loads((save / "layerprobe.json").read_text())
    assert record["layer_path"] == path and record["kept_blocks"] == [0, 2, 3]
    assert (save / "preprocessor_config.json").exists()

    import transformers as tf
    from safetensors.torch import load_file

    source = load_file(clip / "model.safetensors")
    pruned = tf.CLIPModel.from_pretrained(save).eval()
    kept = pruned.vision_model.encoder.layers[1].mlp.fc1.weight
    assert torch.equal(kept, source["vision_model.encoder.layers.2.mlp.fc1.weight"])
    measured = _angular(save, "--layers-path", path, "--dataset", towers("images"), "--out", tmp_path / "a")
    assert measured.exit_code == 0, measured.output


# ------------------------------------------------------------------ depth: images in, or the text tower
@pytest.mark.slow
def test_depth_on_vit_images_and_clip_text_tower(towers, tmp_path):
    vit = _depth(towers("vit"), "--dataset", towers("images"), "--out", tmp_path / "vit")
    assert vit.exit_code == 0, vit.output
    record = json.loads((tmp_path / "vit" / "depth.json").read_text())
    assert record["model"]["stack_role"] == "vision" and record["data"]["positions_per_image"] == 17
    assert record["placement"]["summary"] == "Pre-LN in all 4 blocks"
    assert len(record["residual"]["rms"]) == 5
    clip = _depth(towers("clip"), "--dataset", "builtin:pydoc", "--out", tmp_path / "clip")
    assert clip.exit_code == 0, clip.output
    hint = _one_line_error(_depth(towers("vit"), "--dataset", towers("images"), "--grad", "--out", tmp_path), "--grad")
    assert "without --grad" in hint


def _depth(*args):
    return invoke("depth", *args, "--tokens", "64", "--seq-len", "16", "--batch-size", "2")
