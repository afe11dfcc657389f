"""Sequential prune-curve (`--precision`): every scored set stops when its ΔP is known, and its interval holds.

The reference is the same sets scored on every document (no `--precision`): the sequential run must
score fewer documents, and each full-run ΔP must lie inside the anytime interval its set stopped with.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from factories import loaded_head, prune_spec

from layerprobe.model.progress import Progress
from layerprobe.model.stack import find_layers
from layerprobe.prune.curve import PruneCurveSpec, run_prune_curve
from layerprobe.prune.strategies import blocks_variant
from layerprobe.prune.variants import VariantScorer
from layerprobe.results import load_result

TASK, DOCUMENTS, H, ROUND = "lp_mmlu", 30, 0.5, 4  # lp_mmlu: 20 + 10 documents


@pytest.mark.slow
def test_sequential_sets_score_fewer_documents_and_hold_the_full_run_delta(tiny_checkpoints, tmp_path):
    path = tiny_checkpoints["llama"]
    loaded = loaded_head(path)
    full = prune_spec(path, tasks=(TASK,), limit=None, num_fewshot=0)
    spec = PruneCurveSpec(replace(full, precision=H, round_size=ROUND), methods=("last", "greedy"))
    result = run_prune_curve(spec, tmp_path, loaded=loaded)
    assert result.settings["precision"] == H and result.settings["round_size"] == ROUND
    base = result.baseline[TASK]["acc"]
    assert base.items is not None and base.items < DOCUMENTS  # fewer documents than the full run
    sets = {tuple(s.blocks): s for strategy in result.methods.values() for s in strategy.sets.values()}
    assert sets.keys() >= {(2,), (1, 2)}  # last's spans, besides greedy's choice
    reference = VariantScorer(loaded, find_layers(loaded.model), full, Progress())  # every document
    reference.score([blocks_variant(b) for b in sets], [TASK])
    whole = reference.evaluation(TASK, ()).metrics["acc"]
    assert whole.samples == DOCUMENTS
    for blocks, chosen in sets.items():
        score = chosen.scores[TASK]["acc"]
        low, high = score.delta_cs95
        assert score.items <= base.items and (score.items % ROUND == 0 or score.items == DOCUMENTS)
        assert score.stop == "precision" and high - low <= 2 * H + 1e-12  # H = 0.5 is reached before 30
        full_delta = reference.evaluation(TASK, blocks_variant(blocks)).metrics["acc"].value - whole.value
        assert low <= full_delta <= high, (blocks, full_delta, score.delta_cs95)
        assert score.delta == pytest.approx(score.value - base.value)
    greedy = result.methods["greedy"].cost
    assert greedy["variants_scored"] == 4 + 3 and greedy["documents"] < (4 + 3) * DOCUMENTS  # candidates stop too
    assert load_result(tmp_path / "prune_curve.json").to_dict() == result.to_dict()  # the new fields read back
