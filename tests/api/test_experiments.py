"""`lp.prune_drop`, `lp.compare`, `lp.stability`: on a live model and on result objects, as the commands do."""

from __future__ import annotations

import json

import pytest
import torch
import transformers as tf
from command_line import invoke_prune_drop
from factories import TASKS_DIR

import layerprobe as lp
from layerprobe.core import LayerprobeError
from layerprobe.results import PruneDropResult


@pytest.mark.slow
def test_prune_drop_on_a_live_model_equals_the_cli_and_restores_every_block(tiny_checkpoints, tmp_path):
    path = tiny_checkpoints["llama"]
    model = tf.AutoModelForCausalLM.from_pretrained(path)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    blocks = list(model.model.layers)
    result = lp.prune_drop(
        model,
        tf.AutoTokenizer.from_pretrained(path),
        tasks="lp_arc_like",
        include_path=str(TASKS_DIR),
        limit=4,
        out=tmp_path / "api",
    )
    assert isinstance(result, PruneDropResult)
    assert list(model.model.layers) == blocks
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    cli = invoke_prune_drop(
        path,
        "--task",
        "lp_arc_like",
        "--include-path",
        TASKS_DIR,
        "--limit",
        4,
        "--device",
        "cpu",
        "--quiet",
        "--out",
        tmp_path / "cli",
    )
    assert cli.exit_code == 0, cli.output
    written = json.loads((tmp_path / "cli" / "prune_drop.json").read_text())
    api = json.loads((tmp_path / "api" / "prune_drop.json").read_text())
    for task, scores in written["tasks"].items():
        assert api["tasks"][task]["metrics"] == scores["metrics"]


@pytest.mark.slow
def test_compare_and_stability_take_result_objects(tiny_checkpoints):
    path = tiny_checkpoints["llama"]
    model = tf.AutoModel.from_pretrained(path)
    tokenizer = tf.AutoTokenizer.from_pretrained(path)
    a = lp.angular(model, tokenizer, "builtin:pydoc", tokens=256, seq_len=64)
    b = lp.angular(model, tokenizer, ["Another text, said twice and more. " * 30] * 3, tokens=256, seq_len=64)
    assert lp.compare(a, a).passed
    verdict = lp.compare(a, b)
    assert [c.kind for c in verdict.comparisons] == ["angular"]
    stability = lp.stability([a, b], draws=20)
    assert len(stability.pairs) == 1
    with pytest.raises(LayerprobeError, match="Expected a layerprobe result"):
        lp.compare(a, 3)
