"""prune-drop on a Gemma-3n whose only full-attention block before the KV-sharing block is block 1.

Removing block 1 leaves block 3 nothing to reuse: one line saying why, whose hint (`--layers` without
block 1) is tried here and scores the other blocks.
"""

from __future__ import annotations

import json

import pytest
import torch
import transformers as tf
from command_line import assert_one_line_error, invoke_prune_drop
from factories import byte_level_tokenizer, kv_sharing_config, randomize_norms

F, S = "full_attention", "sliding_attention"
CORPUS = ("--task", "corpus", "--dataset", "builtin:pydoc", "--tokens", "96", "--seq-len", "32", "--device", "cpu")


@pytest.mark.slow
def test_prune_drop_refuses_the_only_store_of_a_type_in_one_line_and_its_hint_works(tmp_path):
    torch.manual_seed(5)
    model = tf.AutoModelForCausalLM.from_config(kv_sharing_config("gemma3n", [S, F, S, F], 1)).eval()
    randomize_norms(model, lambda name: "norm" in name.lower()).save_pretrained(tmp_path / "model")
    byte_level_tokenizer(add_bos=True).save_pretrained(tmp_path / "model")
    refused = invoke_prune_drop(tmp_path / "model", *CORPUS, "--engine", "simple", "--out", tmp_path / "a")
    assert_one_line_error(refused, "no block computes them", tmp_path / "a")
    assert "--layers without them" in refused.output
    hinted = invoke_prune_drop(
        tmp_path / "model", *CORPUS, "--engine", "simple", "--layers", "0,2-3", "--out", tmp_path / "b"
    )
    assert hinted.exit_code == 0, hinted.output
    result = json.loads((tmp_path / "b" / "prune_drop.json").read_text())
    assert result["settings"]["layers"] == [0, 2, 3]
