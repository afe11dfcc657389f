"""Paired ΔP uncertainty, checked against lm-eval's OWN per-sample output and the SQuAD scorer.

The reference side never runs layerprobe's evaluation code: lm-eval's `simple_evaluate(log_samples=True)`
scores the untouched checkpoint and a model rebuilt without the block (`reference.physically_deleted`),
and the paired standard errors are computed here from those logged samples, in float64 by hand (and
the bootstrap of corpus-level metrics replayed draw by draw with lm-eval's aggregation functions).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers as tf
from factories import TASKS, TASKS_DIR, prune_spec, write_squad_jsonl
from reference import agresti_min, lm_eval_reference, physically_deleted

from layerprobe.evaluate.harness import evaluate, make_lm
from layerprobe.evaluate.paired import paired_columns, paired_delta
from layerprobe.evaluate.tasks import build_tasks
from layerprobe.model import find_layers, removed_blocks
from layerprobe.results.evaluation import MetricSamples, from_rows, to_rows
from layerprobe.stats.paired import DEFAULT_DRAWS, DEFAULT_SEED, Z95

LEAVES = {"lp_mmlu": ("lp_mmlu_humanities", "lp_mmlu_stem"), "lp_arc_like": ("lp_arc_like",)}
BATCH, SEED, FEWSHOT = 4, 1234, 1


def lm_eval_samples(model, tokenizer) -> dict:
    """lm-eval's own per-document values (fresh HFLM, fresh tasks, log_samples=True), one-shot."""
    return lm_eval_reference(
        model, tokenizer, TASKS, batch_size=BATCH, seed=SEED, num_fewshot=FEWSHOT, bootstrap_iters=0, log_samples=True
    )["samples"]


def by_doc(samples: dict, leaf: str, metric: str) -> dict:
    return {s["doc_id"]: s[metric] for s in samples[leaf] if s["filter"] == "none"}


def hand_paired_stderr(base: list[float], pruned: list[float]) -> float:
    diffs = [float(p) - float(b) for b, p in zip(base, pruned, strict=True)]
    mean = math.fsum(diffs) / len(diffs)
    return math.sqrt(math.fsum((d - mean) ** 2 for d in diffs) / (len(diffs) - 1)) / math.sqrt(len(diffs))


@pytest.fixture(scope="module")
def scored(tiny_checkpoints):
    """layerprobe's per-sample values (block 1 removed in memory) and lm-eval's on a rebuilt model."""
    path = tiny_checkpoints["llama"]
    tokenizer = tf.AutoTokenizer.from_pretrained(path)
    model = tf.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    task_set = build_tasks(list(TASKS), include_path=TASKS_DIR, num_fewshot=FEWSHOT, seed=SEED)
    lm = make_lm(model, tokenizer, BATCH)
    ours_base = evaluate(lm, task_set, bootstrap_iters=0)
    with removed_blocks(find_layers(model), [1]):
        ours_pruned = evaluate(lm, task_set, bootstrap_iters=0)
    ref_base = lm_eval_samples(model, tokenizer)
    ref_pruned = lm_eval_samples(physically_deleted(path, "llama", 1), tokenizer)
    return ours_base, ours_pruned, ref_base, ref_pruned


@pytest.mark.slow
def test_per_sample_values_are_lm_evals_own(scored):
    ours_base, ours_pruned, ref_base, ref_pruned = scored
    for ours, ref in ((ours_base, ref_base), (ours_pruned, ref_pruned)):
        assert set(ours["lp_mmlu"].per_sample) == {"acc"}
        assert ours["lp_mmlu"].per_sample["acc"].weight_by_size is True
        assert ours["lp_mmlu"].per_sample["acc"].aggregation == "mean"
        for task, leaves in LEAVES.items():
            for metric, found in ours[task].per_sample.items():
                assert set(found.values) == set(leaves)
                for leaf in leaves:
                    assert found.values[leaf] == by_doc(ref, leaf, metric), (task, leaf, metric)
        ppl = ours["lp_pydoc_ppl"].per_sample
        assert {m: s.aggregation for m, s in ppl.items()} == {
            "word_perplexity": "weighted_perplexity",
            "byte_perplexity": "weighted_perplexity",
            "bits_per_byte": "bits_per_byte",
        }
        for metric, found in ppl.items():
            want = by_doc(ref, "lp_pydoc_ppl", metric)
            got = found.values["lp_pydoc_ppl"]
            assert got.keys() == want.keys() and len(got) == 10
            for doc in want:
                assert got[doc][0] == pytest.approx(want[doc][0], rel=1e-5)  # log-likelihood
                assert got[doc][1] == want[doc][1]  # words or bytes


@pytest.mark.slow  # over 2.5 s on 2 cores: the default tier stays under 3 minutes
def test_paired_stderr_of_means_equals_a_hand_computation_on_lm_eval_samples(scored):
    ours_base, ours_pruned, ref_base, ref_pruned = scored
    checked = 0
    assert ours_pruned["lp_mmlu"].metrics["acc"].value != ours_base["lp_mmlu"].metrics["acc"].value
    for task, leaves in LEAVES.items():
        for metric in ours_base[task].per_sample:
            # lm-eval's size-weighted group mean is the mean over all of its documents: pool them.
            base = [v for leaf in leaves for _, v in sorted(by_doc(ref_base, leaf, metric).items())]
            pruned = [v for leaf in leaves for _, v in sorted(by_doc(ref_pruned, leaf, metric).items())]
            got = paired_delta(ours_base[task].per_sample[metric], ours_pruned[task].per_sample[metric])
            want_delta = ours_pruned[task].metrics[metric].value - ours_base[task].metrics[metric].value
            assert got.delta == pytest.approx(want_delta, abs=1e-12)
            assert got.method == "paired_mean"
            assert got.stderr == pytest.approx(hand_paired_stderr(base, pruned), rel=1e-12)
            if all(v in (0, 1) for v in (*base, *pruned)):  # accuracies: Agresti–Min's paired interval
                lost = sum(1 for x, y in zip(base, pruned, strict=True) if x == 1 and y == 0)
                gained = sum(1 for x, y in zip(base, pruned, strict=True) if x == 0 and y == 1)
                assert got.ci95 == pytest.approx(agresti_min(lost, gained, len(base)), abs=1e-12)
            else:
                assert got.ci95 == pytest.approx((got.delta - Z95 * got.stderr, got.delta + Z95 * got.stderr))
            checked += got.stderr > 0
    assert checked >= 1  # the removal changed some answers (MMLU's): a stderr that is not trivially 0


def test_corpus_metrics_use_a_paired_bootstrap_replayed_with_lm_eval_aggregations(scored):
    from lm_eval.api.metrics import bits_per_byte, weighted_perplexity

    ours_base, ours_pruned, ref_base, ref_pruned = scored
    for metric, aggregate in (
        ("word_perplexity", weighted_perplexity),
        ("byte_perplexity", weighted_perplexity),
        ("bits_per_byte", bits_per_byte),
    ):
        base_docs = by_doc(ref_base, "lp_pydoc_ppl", metric)
        pruned_docs = by_doc(ref_pruned, "lp_pydoc_ppl", metric)
        ids = sorted(base_docs)
        base, pruned = [tuple(base_docs[i]) for i in ids], [tuple(pruned_docs[i]) for i in ids]
        rng = np.random.default_rng(DEFAULT_SEED)
        diffs = []
        for _ in range(DEFAULT_DRAWS):
            pick = [int(i) for i in rng.integers(0, len(ids), size=len(ids))]
            diffs.append(aggregate([pruned[i] for i in pick]) - aggregate([base[i] for i in pick]))
        got = paired_delta(ours_base["lp_pydoc_ppl"].per_sample[metric], ours_pruned["lp_pydoc_ppl"].per_sample[metric])
        assert got.method == "paired_bootstrap" and (got.draws, got.seed) == (DEFAULT_DRAWS, DEFAULT_SEED)
        assert got.delta == pytest.approx(aggregate(pruned) - aggregate(base), rel=1e-5)
        assert got.stderr == pytest.approx(float(np.std(diffs, ddof=1)), rel=1e-4)
        assert got.ci95 == pytest.approx(tuple(np.percentile(diffs, [2.5, 97.5])), rel=1e-4)
        assert got.significant == (got.ci95[0] > 0 or got.ci95[1] < 0)


def test_rows_round_trip_and_columns(scored):
    ours_base, ours_pruned, _, _ = scored
    import json

    for task in TASKS:
        specs = {m: s.spec() for m, s in ours_base[task].per_sample.items()}
        rows = json.loads(json.dumps(to_rows(None, ours_base[task].per_sample)))
        back = from_rows(rows, specs)
        assert all(r["variant"] is None and "doc_id" in r and "task" in r for r in rows)
        assert paired_columns(back, [None])["delta_stderr"] == [None]  # a variant without values: no stderr
        for metric, samples in back.items():
            direct = paired_delta(ours_base[task].per_sample[metric], ours_pruned[task].per_sample[metric])
            again = paired_delta(samples, ours_pruned[task].per_sample[metric])
            assert again.stderr == pytest.approx(direct.stderr, rel=1e-12)


def test_groups_pool_when_size_weighted_and_stratify_otherwise():
    base = {"a": {0: 1.0, 1: 0.0, 2: 1.0}, "b": {0: 0.0, 1: 1.0, 2: 0.0, 3: 1.0, 4: 1.0}}
    pruned = {"a": {0: 0.0, 1: 0.0, 2: 1.0}, "b": {0: 1.0, 1: 1.0, 2: 0.0, 3: 0.0, 4: 0.0}}
    diffs = {t: [pruned[t][i] - base[t][i] for i in sorted(base[t])] for t in base}
    pooled = paired_delta(MetricSamples("mean", base, True), MetricSamples("mean", pruned, True))
    everything = [d for t in sorted(diffs) for d in diffs[t]]
    assert pooled.stderr == pytest.approx(hand_paired_stderr([0.0] * 8, everything), rel=1e-12)
    assert pooled.delta == pytest.approx(sum(everything) / 8)
    unweighted = paired_delta(MetricSamples("mean", base, False), MetricSamples("mean", pruned, False))
    per_task = [hand_paired_stderr([0.0] * len(d), d) for d in diffs.values()]
    assert unweighted.stderr == pytest.approx(math.sqrt(sum(0.25 * se**2 for se in per_task)), rel=1e-12)
    assert unweighted.delta == pytest.approx(sum(0.5 * sum(d) / len(d) for d in diffs.values()))


def test_unpaired_documents_give_no_stderr():
    base = MetricSamples("mean", {"t": {0: 1.0, 1: 0.0}})
    other = MetricSamples("mean", {"t": {0: 1.0, 2: 0.0}})
    assert paired_delta(base, other) is None
    columns = paired_columns(base, [other, base])
    assert columns["delta_stderr"] == [None, 0.0] and columns["significant"] == [None, False]
    assert columns["delta_method"] == "paired_mean" and columns["bootstrap"] is None


# ------------------------------------------------------------------------- through prune-drop, end to end


def read_jsonl(path: Path) -> list[dict]:
    import json

    return [json.loads(line) for line in path.read_text().splitlines()]


def hand_bootstrap(base: list, pruned: list, aggregate) -> tuple[float, list[float], float]:
    """stderr, percentile 95 % interval and two-sided p-value of the paired bootstrap, written out here."""
    rng = np.random.default_rng(DEFAULT_SEED)
    diffs = []
    for _ in range(DEFAULT_DRAWS):
        pick = [int(i) for i in rng.integers(0, len(base), size=len(base))]
        diffs.append(aggregate([pruned[i] for i in pick]) - aggregate([base[i] for i in pick]))
    delta = aggregate(pruned) - aggregate(base)
    other = sum(d <= 0 for d in diffs) if delta > 0 else sum(d >= 0 for d in diffs)
    pvalue = 1.0 if delta == 0 else min(1.0, 2 * (1 + other) / (len(diffs) + 1))
    return float(np.std(diffs, ddof=1)), [float(v) for v in np.percentile(diffs, [2.5, 97.5])], pvalue


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["simple", "shared"])
def test_prune_drop_paired_fields_and_samples_equal_lm_eval_on_physically_pruned_models(
    engine, tiny_checkpoints, tmp_path
):
    from lm_eval.api.metrics import bits_per_byte, weighted_perplexity

    from layerprobe.core import ModelSpec
    from layerprobe.model.load import load_model
    from layerprobe.prune.drop import run_prune_drop

    path = tiny_checkpoints["llama"]
    loaded = load_model(ModelSpec(str(path), device="cpu"), purpose="head")
    spec = prune_spec(path, layers="1,3", num_fewshot=FEWSHOT, limit=None, log_samples=True, engine=engine)
    result = run_prune_drop(spec, tmp_path, loaded=loaded)
    assert result.engine == engine
    tokenizer = tf.AutoTokenizer.from_pretrained(path)
    reference = {None: lm_eval_samples(tf.AutoModelForCausalLM.from_pretrained(path).eval(), tokenizer)}
    for layer in (1, 3):
        reference[layer] = lm_eval_samples(physically_deleted(path, "llama", layer), tokenizer)

    # The JSON lines are lm-eval's own per-document values, for every variant.
    for task in TASKS:
        rows = read_jsonl(tmp_path / "samples" / f"{task}.jsonl")
        assert [r["variant"] for r in rows] == sorted(
            (r["variant"] for r in rows), key=lambda v: -1 if v is None else v
        )
        for row in rows:
            want = {s["doc_id"]: s for s in reference[row["variant"]][row["task"]] if s["filter"] == "none"}
            for metric in result.tasks[task].metrics:
                got, expected = row[metric], want[row["doc_id"]][metric]
                if isinstance(expected, (list, tuple)):
                    assert got[0] == pytest.approx(expected[0], rel=1e-5) and got[1] == expected[1]
                else:
                    assert got == expected
        leaves = LEAVES.get(task, (task,))
        assert len(rows) == 3 * sum(len(reference[None][leaf]) for leaf in leaves)

    # delta_stderr by hand from lm-eval's logged samples: closed form for means, bootstrap for the rest.
    aggregations = {"word_perplexity": weighted_perplexity, "byte_perplexity": weighted_perplexity}
    aggregations["bits_per_byte"] = bits_per_byte
    for task in TASKS:
        leaves = LEAVES.get(task, (task,))
        for metric, drop in result.tasks[task].metrics.items():
            for k, layer in enumerate(drop.layers):
                base = [v for leaf in leaves for _, v in sorted(by_doc(reference[None], leaf, metric).items())]
                pruned = [v for leaf in leaves for _, v in sorted(by_doc(reference[layer], leaf, metric).items())]
                if metric in aggregations:
                    se, ci, p = hand_bootstrap(
                        [tuple(v) for v in base], [tuple(v) for v in pruned], aggregations[metric]
                    )
                    assert drop.delta_method == "paired_bootstrap" and drop.bootstrap == {"draws": 1000, "seed": 1234}
                    assert drop.delta_stderr[k] == pytest.approx(se, rel=1e-3)
                    assert drop.delta_ci95[k] == pytest.approx(ci, rel=1e-3)
                    assert drop.p_value[k] == pytest.approx(p, rel=1e-12)
                else:
                    assert drop.delta_method == "paired_mean" and drop.bootstrap is None
                    assert drop.delta_stderr[k] == pytest.approx(hand_paired_stderr(base, pruned), rel=1e-9, abs=1e-15)
                # significant: the run's Holm-adjusted p-value below 0.05 (tests/prune/test_assemble.py)
                assert drop.significant[k] == (drop.p_adjusted[k] < 0.05)
    mmlu = result.tasks["lp_mmlu"].metrics["acc"]
    assert any(se > 0 for se in mmlu.delta_stderr)  # some answers changed: not a trivially zero stderr
    # The paired stderr is narrower than the unpaired combination the gate used to apply.
    ppl = result.tasks["lp_pydoc_ppl"].metrics["bits_per_byte"]
    assert all(s is not None and s > 0 for s in ppl.delta_stderr)
    assert not (tmp_path / "prune_drop.partial.samples").exists()


def test_squad_per_question_values_equal_the_scorer_on_a_physically_deleted_qa_model(tiny_checkpoints, tmp_path):
    from layerprobe.core import ModelSpec, PruneSpec
    from layerprobe.data.squad import load_squad
    from layerprobe.evaluate.squad import SquadScorer, per_question_scores
    from layerprobe.prune.drop import run_prune_drop

    squad = write_squad_jsonl(tmp_path / "squad.jsonl")
    path = tiny_checkpoints["bert_qa"]
    spec = PruneSpec(
        model=ModelSpec(str(path), device="cpu"),
        tasks=("squad",),
        squad_data=str(squad),
        batch_size=BATCH,
        layers="0,2",
        log_samples=True,
    )
    result = run_prune_drop(spec, tmp_path / "out")
    logged = read_jsonl(tmp_path / "out" / "samples" / "squad.jsonl")
    examples = load_squad(squad)
    tokenizer = tf.AutoTokenizer.from_pretrained(path)
    per_variant = {}
    for variant in (None, 0, 2):
        if variant is None:
            model = tf.AutoModelForQuestionAnswering.from_pretrained(path).eval()
        else:
            model = physically_deleted(path, "bert_qa", variant)
        scores = SquadScorer(model, tokenizer, examples, max_length=256, doc_stride=128, batch_size=BATCH)()
        per_variant[variant] = per_question_scores(examples, scores.predictions)
        mine = {r["doc_id"]: r for r in logged if r["variant"] == variant}
        assert set(mine) == {e.id for e in examples}
        for metric in ("f1", "exact_match"):
            assert {i: r[metric] for i, r in mine.items()} == per_variant[variant][metric]
            assert all(r["task"] == "squad" for r in mine.values())
    for metric in ("f1", "exact_match"):
        drop = result.tasks["squad"].metrics[metric]
        assert drop.delta_method == "paired_mean"
        for k, layer in enumerate(drop.layers):
            ids = [e.id for e in examples]
            base = [per_variant[None][metric][i] for i in ids]
            pruned = [per_variant[layer][metric][i] for i in ids]
            assert drop.delta_stderr[k] == pytest.approx(hand_paired_stderr(base, pruned), rel=1e-12, abs=1e-15)
