"""prune-drop on vision-language models (text only) and on per-layer designs, with both engines.

A VLM is loaded through its own auto class (AutoModelForImageTextToText) and its language model scored on
lm-eval tasks and on the corpus metric; the two engines — blocks deleted and the whole model re-run (simple),
recorded states replayed (shared) — must agree on every block's score. The removal itself is checked against
a model rebuilt without the block in tests/model/test_designs.py.
"""

from __future__ import annotations

import json

import pytest
from command_line import invoke_prune_drop
from factories import TASKS_DIR, VLM_FAMILIES, build_design_checkpoint, build_vlm_checkpoint

CORPUS = ("--task", "corpus", "--dataset", "builtin:pydoc", "--tokens", "512", "--seq-len", "64", "--device", "cpu")


def _scores(out, task: str, metric: str) -> tuple[float, list[float]]:
    result = json.loads((out / "prune_drop.json").read_text())["tasks"][task]["metrics"][metric]
    return result["baseline"], result["pruned"]


def _both_engines(model, tmp_path, *args) -> dict[str, object]:
    runs = {}
    for engine in ("simple", "shared"):
        out = tmp_path / engine
        result = invoke_prune_drop(model, *args, "--engine", engine, "--out", out)
        assert result.exit_code == 0, result.output
        runs[engine] = out
    return runs


@pytest.mark.slow
@pytest.mark.parametrize("family", VLM_FAMILIES)
def test_a_vlm_is_scored_on_the_corpus_by_both_engines_alike(family, tmp_path):
    model = build_vlm_checkpoint(family, tmp_path / "model")
    runs = _both_engines(model, tmp_path, *CORPUS)
    (base_simple, simple), (base_shared, shared) = (_scores(runs[e], "corpus", "nll") for e in ("simple", "shared"))
    assert base_simple == pytest.approx(base_shared, abs=1e-4)
    assert simple == pytest.approx(shared, abs=1e-4) and len(simple) == 4
    assert len(set(simple)) > 1  # removing different blocks changes the score differently


@pytest.mark.slow
def test_a_vlm_is_scored_on_an_lm_eval_task_by_both_engines_alike(tmp_path):
    model = build_vlm_checkpoint("qwen2_5_vl", tmp_path / "model")
    task = ("--task", "lp_pydoc_ppl", "--include-path", TASKS_DIR, "--limit", "3", "--device", "cpu")
    runs = _both_engines(model, tmp_path, *task)
    record = json.loads((runs["simple"] / "prune_drop.json").read_text())
    metric = next(iter(record["tasks"]["lp_pydoc_ppl"]["metrics"]))
    (base_simple, simple), (base_shared, shared) = (_scores(runs[e], "lp_pydoc_ppl", metric) for e in runs)
    assert base_simple == pytest.approx(base_shared, rel=1e-4)
    assert simple == pytest.approx(shared, rel=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("family", ["gemma3n", "zamba2", "nemotron_h"])
def test_per_layer_designs_are_scored_by_both_engines_alike(family, tmp_path):
    """Gemma-3n (per-layer inputs), Zamba2 (shared-block map), Nemotron-H (the model reads block_type)."""
    model = build_design_checkpoint(family, tmp_path / "model")
    runs = _both_engines(model, tmp_path, *CORPUS)
    (_, simple), (_, shared) = (_scores(runs[e], "corpus", "nll") for e in ("simple", "shared"))
    assert simple == pytest.approx(shared, abs=1e-4)
