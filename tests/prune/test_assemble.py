"""prune_drop.json's significance (p-values adjusted over the whole run) and flip rates of generating tasks.

The flags are checked against a direct computation written here (Holm by hand, Benjamini–Hochberg by
scipy.stats.false_discovery_control) on the p-values of a real tiny run, and each closed-form p-value
against the normal test of its own paired ΔP and stderr.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import transformers as tf
from factories import GATE_PRUNED, acc_drop, arc_result, loaded_head, prune_spec
from factories.stability import corpus
from reference import holm_adjusted, lm_eval_reference, physically_deleted
from scipy import stats

from layerprobe.prune.assemble import adjust_significance
from layerprobe.prune.drop import run_prune_drop
from layerprobe.results import RunDir, load_result, write_json


def flat(result, field):
    """Every (task, metric, block) entry of one per-block field, in the run's order."""
    return [
        getattr(metric, field)[i]
        for task in result.tasks.values()
        for metric in task.metrics.values()
        for i in range(len(metric.layers))
    ]


@pytest.fixture(scope="module")
def holm_run(tiny_checkpoints, tmp_path_factory):
    path = tiny_checkpoints["llama"]
    out = tmp_path_factory.mktemp("holm")
    # An accuracy, NLL and perplexity that stay within noise, and the corpus task's KL and top-1
    # agreement, which every removal moves: a family of 4 blocks × 5 metrics, closed-form and bootstrap.
    tasks = ("lp_mmlu", "corpus")
    spec = prune_spec(path, tasks=tasks, layers="0-3", limit=6, engine="auto", corpus=corpus(tokens=384))
    return run_prune_drop(spec, out, loaded=loaded_head(path)), out


def test_flags_are_holm_adjusted_over_every_variant_task_and_metric_of_a_real_run(holm_run):
    result, out = holm_run
    assert result.settings["multiplicity"] == "holm"
    raw = flat(result, "p_value")
    assert None not in raw and len(raw) == 4 * 5 == result.family  # 4 blocks × (1 + 4) metrics
    for task in result.tasks.values():
        for name, metric in task.metrics.items():
            for i, p in enumerate(metric.p_value):
                if name == "acc":  # 0/1 per document: the exact McNemar test of the answers lost and gained
                    n, se = task.samples, metric.delta_stderr[i]
                    # diffs in {−1, 0, 1}: c − b = n·ΔP and b + c = (n − 1)·n·se² + n·ΔP² (the sample variance)
                    net, changed = n * metric.delta[i], (n - 1) * n * se**2 + n * metric.delta[i] ** 2
                    b, c = round((changed - net) / 2), round((changed + net) / 2)
                    want = 1.0 if b + c == 0 else stats.binomtest(b, b + c).pvalue
                    assert p == pytest.approx(want, rel=1e-9)
                elif metric.delta_method == "paired_mean":  # the normal test of the paired interval
                    se = metric.delta_stderr[i]
                    want = (
                        (1.0 if metric.delta[i] == 0 else 0.0)
                        if se == 0
                        else 2 * stats.norm.sf(abs(metric.delta[i]) / se)
                    )
                    assert p == pytest.approx(want, rel=1e-9, abs=1e-300)
                else:  # the bootstrap test (checked against its draws in tests/evaluate/test_paired.py)
                    low, high = metric.delta_ci95[i]  # goes with the percentile interval, up to its +1
                    assert 0 < p <= 1 and (p >= 0.04 or low > 0 or high < 0)
                    assert p <= 0.06 or low <= 0 <= high
    holm = holm_adjusted(raw)
    assert flat(result, "p_adjusted") == pytest.approx(holm, rel=1e-12)
    assert flat(result, "significant") == [p < 0.05 for p in holm]
    assert any(flat(result, "significant"))  # KL and top-1 agreement move beyond noise
    unadjusted = [p < 0.05 for p in raw]
    assert not all(flat(result, "significant")) and sum(unadjusted) >= sum(flat(result, "significant"))
    back = load_result(out / "prune_drop.json")  # the file says the same
    assert flat(back, "p_adjusted") == flat(result, "p_adjusted") and back.settings["multiplicity"] == "holm"
    for name, task in back.tasks.items():
        metric = task.metrics[task.primary_metric]
        flagged = [l for l, s in zip(metric.layers, metric.significant, strict=True) if s]
        assert back.summary[name]["significant_layers"] == flagged


def test_bh_and_none_change_only_the_flags(holm_run):
    result, _ = holm_run
    raw = flat(result, "p_value")
    bh = replace(result, tasks=adjust_significance(result.tasks, "bh"))
    want = [float(v) for v in stats.false_discovery_control(raw, method="bh")]
    assert flat(bh, "p_adjusted") == pytest.approx(want, rel=1e-12)
    assert flat(bh, "significant") == [p < 0.05 for p in want]
    none = replace(result, tasks=adjust_significance(result.tasks, "none"))
    assert flat(none, "p_adjusted") == raw and flat(none, "significant") == [p < 0.05 for p in raw]
    measured = ("baseline", "pruned", "stderr", "delta_stderr", "delta_ci95", "p_value", "delta_method", "bootstrap")
    for other in (bh, none):
        for field in measured:
            for task, body in other.tasks.items():
                for name, metric in body.metrics.items():
                    assert getattr(metric, field) == getattr(result.tasks[task].metrics[name], field)


def paired_acc():
    return acc_drop(GATE_PRUNED, [0.01, 0.02, None, 0.03])


def test_a_family_of_three_tests_unflags_a_raw_p_of_three_percent():
    result = arc_result(replace(paired_acc(), p_value=[0.03, 0.001, None, 0.2]))
    adjusted = adjust_significance(result.tasks, "holm")["arc"].metrics["acc"]
    assert adjusted.p_adjusted == pytest.approx([0.06, 0.003, None, 0.2])  # m = 3: the None is left out
    assert adjusted.significant == [False, True, None, False]
    unadjusted = adjust_significance(result.tasks, "none")["arc"].metrics["acc"]
    assert unadjusted.significant == [True, True, None, False]


def test_old_files_without_p_values_keep_their_stored_flags(tmp_path):
    metric = paired_acc()
    old = arc_result(metric).to_dict()
    for field in ("p_value", "p_adjusted"):
        old["tasks"]["arc"]["metrics"]["acc"].pop(field)
    old["settings"].pop("multiplicity", None)
    back = load_result(write_json(tmp_path / "old.json", old))
    assert back.tasks["arc"].metrics["acc"].significant == metric.significant
    assert back.tasks["arc"].metrics["acc"].p_value is None and back.family is None


# --------------------------------------------------------------------- flip rates of a generating task
@pytest.mark.slow
def test_flip_rates_equal_a_direct_count_on_lm_eval_run_directly_on_physically_pruned_models(
    tiny_checkpoints, tasks_with_generation, tmp_path
):
    path = tiny_checkpoints["llama"]
    spec = prune_spec(
        path,
        tasks=("lp_gsm",),
        layers="0,3",
        limit=8,
        num_fewshot=None,
        include_path=str(tasks_with_generation),
        engine="auto",
        log_samples=True,
    )
    result = run_prune_drop(spec, tmp_path, loaded=loaded_head(path))
    assert result.engine == "simple"
    tokenizer = tf.AutoTokenizer.from_pretrained(path)
    models = {None: tf.AutoModelForCausalLM.from_pretrained(path).eval()}
    models |= {layer: physically_deleted(path, "llama", layer) for layer in (0, 3)}
    samples = {  # lm-eval itself, on the untouched model and on models rebuilt without the block
        variant: lm_eval_reference(
            model, tokenizer, ["lp_gsm"], tasks_dir=tasks_with_generation, limit=8, log_samples=True
        )
        for variant, model in models.items()
    }
    task = result.tasks["lp_gsm"]
    for name, metric in task.metrics.items():  # the same scores
        key = name if "," in name else f"{name},none"
        assert metric.baseline == samples[None]["results"]["lp_gsm"][key]
        assert metric.pruned == [samples[layer]["results"]["lp_gsm"][key] for layer in (0, 3)]
    rows = read_jsonl(RunDir(tmp_path).sample_file("lp_gsm"))
    assert set(task.flip_rate) == {"strict-match", "flexible-extract"}
    for filter_name, rate in task.flip_rate.items():
        answers = {
            variant: {
                s["doc_id"]: s["filtered_resps"][0] for s in logged["samples"]["lp_gsm"] if s["filter"] == filter_name
            }
            for variant, logged in samples.items()
        }
        logged = {(r["variant"], r["doc_id"]): r[f"answer,{filter_name}"] for r in rows}
        assert logged == {(v, d): a for v, by_doc in answers.items() for d, a in by_doc.items()}  # same generations
        flips = [sum(answers[layer][d] != answers[None][d] for d in answers[None]) for layer in (0, 3)]
        assert rate.layers == [0, 3] and rate.flips == flips and rate.documents == 8
        assert rate.rate == [k / 8 for k in flips]
        for k, (low, high) in zip(flips, rate.ci95, strict=True):
            want = stats.binomtest(k, 8).proportion_ci(confidence_level=0.95, method="wilson")
            assert (low, high) == pytest.approx((want.low, want.high), abs=1e-12)
    assert any(task.flip_rate["flexible-extract"].flips)  # a removal changes some answers: the count can fail
    back = load_result(tmp_path / "prune_drop.json").tasks["lp_gsm"].flip_rate
    assert {n: r.to_dict() for n, r in back.items()} == {n: r.to_dict() for n, r in task.flip_rate.items()}


def read_jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines()]
