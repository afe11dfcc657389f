"""`heal --task`: the three models' task scores equal lm-eval run directly on the saved checkpoints.

lm-eval's own `simple_evaluate` scores the source, the pruned checkpoint `prune --save` writes and the healed
checkpoint `heal --save` writes; heal.json must hold exactly those scores and their stderrs, the paired
differences must be the differences of those scores, and the task recovery the ratio of the test's own
document means where it is defined.
"""

from __future__ import annotations

import json

import pytest
import torch
import transformers as tf
from command_line import invoke
from factories import TASKS_DIR, build_checkpoint
from reference import lm_eval_reference

from layerprobe.core import BUILTIN_CORPUS, ExportSpec, ModelSpec
from layerprobe.export import run_export

TASK, LIMIT = "lp_arc_like", 12


def _scores(results):
    reported = results["results"][TASK]
    return {
        key.split(",")[0]: (float(v), float(reported[key.replace(",", "_stderr,")]))
        for key, v in reported.items()
        if key.endswith(",none") and "_stderr" not in key
    }


def _documents(results, metric):
    return [float(doc[metric]) for doc in sorted(results["samples"][TASK], key=lambda d: d["doc_id"])]


@pytest.mark.slow
def test_heal_task_scores_equal_lm_eval_on_the_saved_checkpoints(tmp_path):
    source = build_checkpoint("llama", tmp_path / "src", num_layers=5)
    result = invoke(
        "heal", source, "--remove", "2-3", "--dataset", BUILTIN_CORPUS, "--tokens", 512, "--held-out-tokens", 256,
        "--seq-len", 64, "--device", "cpu", "--task", TASK, "--include-path", TASKS_DIR, "--limit", LIMIT,
        "--save", tmp_path / "healed", "--out", tmp_path / "out", "--quiet",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert f"{TASK} acc: original" in result.output
    run_export(ExportSpec(ModelSpec(str(source)), str(tmp_path / "pruned"), remove="2-3"))
    tokenizer = tf.AutoTokenizer.from_pretrained(source)
    reference = {}
    for label, path in (("original", source), ("pruned", tmp_path / "pruned"), ("healed", tmp_path / "healed")):
        model = tf.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
        reference[label] = lm_eval_reference(model, tokenizer, [TASK], limit=LIMIT, log_samples=True)
    record = json.loads((tmp_path / "out" / "heal.json").read_text())["tasks"][TASK]
    assert record["samples"] == LIMIT
    for metric in ("acc", "acc_norm"):
        entry = record["metrics"][metric]
        for label in ("original", "pruned", "healed"):
            value, stderr = _scores(reference[label])[metric]
            assert entry[label]["value"] == value, (metric, label)
            assert entry[label]["stderr"] == pytest.approx(stderr, rel=1e-5), (metric, label)
        for label in ("pruned", "healed"):
            delta = entry[f"{label}_delta"]
            assert delta["value"] == pytest.approx(entry[label]["value"] - entry["original"]["value"], abs=1e-12)
            low, high = delta["ci95"]
            assert low <= delta["value"] <= high
        o, p, h = (_documents(reference[label], metric) for label in ("original", "pruned", "healed"))
        rec = entry["recovery"]
        if rec["defined"]:
            want = (sum(h) - sum(p)) / (sum(o) - sum(p))
            assert rec["value"] == pytest.approx(want) and rec["ci95"][0] <= rec["value"] <= rec["ci95"][1]
        else:
            assert "costs nothing measurable" in rec["reason"]
