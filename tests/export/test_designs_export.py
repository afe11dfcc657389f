"""`prune --save` on designs that index by layer outside their blocks, and on vision-language models.

Each export is loaded back with its own auto class (every weight found, none left over) and must give the
logits of the in-memory removal; where a design cannot lose a block, the refusal's hint is tried.
"""

from __future__ import annotations

import json

import pytest
import torch
import transformers as tf
from factories import (
    DESIGN_FAMILIES,
    VLM_FAMILIES,
    build_design_checkpoint,
    build_vlm_checkpoint,
    copy_with_config,
)

from layerprobe.core import ExportSpec, ModelSpec
from layerprobe.core.errors import UnsupportedModel
from layerprobe.export.save import run_export
from layerprobe.model import find_layers, quiet_transformers, removed_blocks

IDS = torch.tensor([[1, 17, 40, 93, 5, 250, 7, 64, 301, 12, 33, 2]])


def _reloads_as_in_memory(auto_class, source, exported, removed: list[int]) -> None:
    with quiet_transformers():
        model = auto_class.from_pretrained(source).eval()
        reloaded, info = auto_class.from_pretrained(exported, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    with torch.no_grad(), removed_blocks(find_layers(model), removed):
        expected = model(input_ids=IDS, use_cache=False).logits
    with torch.no_grad():
        got = reloaded.eval()(input_ids=IDS, use_cache=False).logits
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("family", DESIGN_FAMILIES)
def test_exported_design_reloads_and_computes_the_in_memory_removal(family, tmp_path):
    source = build_design_checkpoint(family, tmp_path / "source")
    for removed in (0, 1):
        out = tmp_path / f"without-{removed}"
        run_export(ExportSpec(ModelSpec(str(source)), str(out), remove=str(removed)))
        _reloads_as_in_memory(tf.AutoModelForCausalLM, source, out, [removed])


@pytest.mark.slow
def test_gemma4_refuses_a_kept_set_ending_on_sliding_attention_and_its_hint_works(tmp_path):
    source = build_design_checkpoint("gemma4", tmp_path / "source")
    with pytest.raises(UnsupportedModel, match="makes its last block full attention") as refused:
        run_export(ExportSpec(ModelSpec(str(source)), str(tmp_path / "a"), remove="3"))
    assert "--remove 2-3" in refused.value.hint  # block 1 is the last full-attention block kept
    run_export(ExportSpec(ModelSpec(str(source)), str(tmp_path / "b"), remove="2-3"))
    _reloads_as_in_memory(tf.AutoModelForCausalLM, source, tmp_path / "b", [2, 3])


@pytest.mark.slow
def test_zamba2_with_two_shared_blocks_refuses_one_hybrid_layer_and_its_hint_works(tmp_path):
    built = build_design_checkpoint("zamba2", tmp_path / "built")
    source = copy_with_config(built, tmp_path / "source", num_mem_blocks=2)
    with quiet_transformers():  # re-save so the second shared block has its own weights
        tf.AutoModelForCausalLM.from_pretrained(source).save_pretrained(source)
    with pytest.raises(UnsupportedModel, match="cycles its 2 shared blocks") as refused:
        run_export(ExportSpec(ModelSpec(str(source)), str(tmp_path / "a"), remove="1"))
    assert "Remove hybrid layers 2 at a time" in refused.value.hint and "[1, 3]" in refused.value.hint
    run_export(ExportSpec(ModelSpec(str(source)), str(tmp_path / "b"), remove="1,3"))  # both hybrid layers
    _reloads_as_in_memory(tf.AutoModelForCausalLM, source, tmp_path / "b", [1, 3])
    run_export(ExportSpec(ModelSpec(str(source)), str(tmp_path / "c"), remove="0"))  # a Mamba block
    _reloads_as_in_memory(tf.AutoModelForCausalLM, source, tmp_path / "c", [0])


@pytest.mark.slow
@pytest.mark.parametrize("family", VLM_FAMILIES)
def test_exported_vlm_keeps_its_vision_tower_and_processor_and_reloads_as_in_memory(family, tmp_path):
    source = build_vlm_checkpoint(family, tmp_path / "source")
    out = tmp_path / "out"
    run_export(ExportSpec(ModelSpec(str(source)), str(out), remove="1"))
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == json.loads((source / "config.json").read_text())["architectures"]
    assert config["text_config"]["num_hidden_layers"] == 3
    assert (out / "preprocessor_config.json").read_text() == (source / "preprocessor_config.json").read_text()
    assert (out / "tokenizer.json").exists()
    _reloads_as_in_memory(tf.AutoModelForImageTextToText, source, out, [1])
    with quiet_transformers():
        model = tf.AutoModelForImageTextToText.from_pretrained(source)
        reloaded = tf.AutoModelForImageTextToText.from_pretrained(out)
    vision = {k: v for k, v in model.state_dict().items() if "vision" in k or "visual" in k}
    assert vision and all(torch.equal(reloaded.state_dict()[k], v) for k, v in vision.items())
