"""prune-curve: every strategy's choice against the test's own, and the scores against physically changed models.

Gromov's span, the influence order and the delta order come from a given angular matrix or a hand-made
prune_drop.json; the greedy searches (blocks and sublayers) are checked against a brute-force loop that
deletes blocks (or zeroes output projections) with the test's own code and scores every candidate in
float64; the recorded search cost against a count of the block passes the shared engine must run. The
flip rates of a generating task's chosen sets against lm-eval run directly on models rebuilt without them.
"""

from __future__ import annotations

import re

import pytest
import torch
import transformers as tf
from factories import TASKS_DIR, banded_distances, loaded_head, metric_drop, model_info, prune_drop_result, prune_spec
from reference import corpus_reference, deleted_span_float64, lm_eval_reference, physically_deleted, zeroed_projections
from scipy import stats

from layerprobe.core import BUILTIN_CORPUS, AngularSpec, CorpusSpec, ModelSpec, PruneSpec
from layerprobe.core.errors import LayerprobeError
from layerprobe.evaluate.corpus_metric import corpus_windows
from layerprobe.measure.angular import run_angular
from layerprobe.model.load import load_model
from layerprobe.prune.curve import PruneCurveSpec, choose_spans, gromov_start, run_prune_curve
from layerprobe.prune.drop import run_prune_drop
from layerprobe.results import PruneCurveResult, load_result, write_json

CORPUS = CorpusSpec(BUILTIN_CORPUS, tokens=48, seq_len=16)


def test_gromov_picks_the_argmin_span():
    m = banded_distances(6, {(3, 4): 0.01, (1, 3): 0.05, (2, 5): 0.02})
    assert [gromov_start(m, n) for n in (1, 2, 3)] == [3, 1, 2]
    chosen = choose_spans(m, 3, seeds=[7, 8])
    assert chosen["last"] == {1: 4, 2: 3, 3: 2}  # the n blocks before the final block 5
    for seed in (7, 8):
        starts = chosen[f"random_{seed}"]
        assert all(0 <= s <= 6 - n for n, s in starts.items())
    assert chosen["random_7"] == choose_spans(m, 3, seeds=[7])["random_7"]  # fixed seeds: reproducible


def test_bad_fraction_refused():
    spec = PruneSpec(ModelSpec("x"), ("corpus",))
    for bad in (0, 1.5):
        with pytest.raises(LayerprobeError):
            PruneCurveSpec(spec, max_fraction=bad)
    with pytest.raises(LayerprobeError):
        PruneCurveSpec(spec, baseline_seeds=-1)


def test_curve_uses_given_angular_and_scores_physically_deleted_spans(tiny_checkpoints, tmp_path):
    path = tiny_checkpoints["llama"]
    model = ModelSpec(str(path), dtype="float32", device="cpu")
    measured = run_angular(AngularSpec(model, CORPUS))
    data = measured.to_dict()
    data["distance"] = banded_distances(4, {(2, 3): 0.001, (1, 3): 0.002})  # argmin: n=1 → 2, n=2 → 1
    write_json(tmp_path / "angular.json", data)
    prune = PruneSpec(model, ("corpus",), batch_size=2, corpus=CORPUS)
    spec = PruneCurveSpec(prune, max_fraction=0.5, angular=str(tmp_path / "angular.json"))
    result = run_prune_curve(spec, tmp_path)
    assert result.selection["start"] == [2, 1] and result.selection["distance"] == [0.001, 0.002]
    nll = result.tasks["corpus"]["nll"]
    assert nll.methods["angular"].start == [2, 1] and nll.methods["last"].start == [2, 1]
    base64 = tf.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float64).eval()
    windows = corpus_windows(load_model(model, purpose="head"), CORPUS)
    for n, start in ((1, 2), (2, 1)):
        span = tuple(range(start, start + n))
        ref = corpus_reference(base64, deleted_span_float64(path, "llama", span, tmp_path / f"del{n}"), windows)
        index = nll.methods["angular"].n.index(n)
        assert nll.methods["angular"].score[index] == pytest.approx(sum(ref["nll"]) / len(windows), abs=2e-5)
        kl = result.tasks["corpus"]["kl"].methods["angular"]
        assert kl.delta[index] == pytest.approx(sum(ref["kl"]) / len(windows), abs=2e-5)
        assert kl.delta_stderr[index] is not None and kl.delta_stderr[index] > 0
    again = load_result(tmp_path / "prune_curve.json")  # validated on read, round trip
    assert isinstance(again, PruneCurveResult) and again.to_dict() == result.to_dict()
    keys = set(re.findall(r'"(\w+)":', (tmp_path / "prune_curve.json").read_text()))
    assert not keys & {"precision", "round_size", "items", "stop", "delta_cs95", "flip_rate"}  # without --precision


def _angular_file(tmp_path, model, low):
    data = run_angular(AngularSpec(model, CORPUS)).to_dict()
    data["distance"] = banded_distances(4, low)
    return str(write_json(tmp_path / "angular.json", data))


def _reference_nll(base64, variant, windows) -> float:
    return sum(corpus_reference(base64, variant, windows)["nll"]) / len(windows)


def test_influence_and_delta_choose_what_the_test_computes(tiny_checkpoints, tmp_path):
    path = tiny_checkpoints["llama"]
    model = ModelSpec(str(path), dtype="float32", device="cpu")
    adjacent = {(0, 1): 0.30, (1, 2): 0.10, (2, 3): 0.40, (3, 4): 0.20}
    angular = _angular_file(tmp_path, model, adjacent)
    drop = prune_drop_result(
        {"corpus": {"nll": metric_drop(3.0, [3.9, 3.2, 3.1, 4.5], hib=False), "kl": metric_drop(0, [1, 2, 3, 4])}},
        model=model_info(4, id=str(path)),
        settings={"unit": "block", "span": 1},
    )
    drop_path = str(write_json(tmp_path / "prune_drop.json", drop.to_dict()))
    prune = PruneSpec(model, ("corpus",), batch_size=2, corpus=CORPUS)
    spec = PruneCurveSpec(prune, methods=("influence", "delta"), prune_drop=drop_path, metric="nll", angular=angular)
    result = run_prune_curve(spec, tmp_path / "out")
    order = sorted(range(4), key=lambda l: adjacent[(l, l + 1)])  # argsort of d(x^l, x^(l+1)): 1, 3, 0, 2
    assert {n: s.blocks for n, s in result.methods["influence"].sets.items()} == {1: [1], 2: sorted(order[:2])}
    assert {n: s.blocks for n, s in result.methods["delta"].sets.items()} == {1: [2], 2: [1, 2]}  # lowest NLL first
    assert result.methods["delta"].cost["source"] == drop_path and result.methods["delta"].cost["variants_scored"] == 0
    assert result.methods["influence"].sets[2].start is None  # blocks 1 and 3: not a span
    base64 = tf.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float64).eval()
    windows = corpus_windows(load_model(model, purpose="head"), CORPUS)
    variant = deleted_span_float64(path, "llama", (1, 3), tmp_path / "del13")
    score = result.methods["influence"].sets[2].scores["corpus"]["nll"]
    assert score.value == pytest.approx(_reference_nll(base64, variant, windows), abs=2e-5)
    assert score.delta_ci95[0] < score.delta < score.delta_ci95[1]
    kl = drop.to_dict()
    kl["settings"]["span"] = 2
    refused = PruneCurveSpec(prune, methods=("delta",), prune_drop=str(write_json(tmp_path / "span.json", kl)))
    with pytest.raises(LayerprobeError, match="delta reads single blocks"):
        run_prune_curve(refused, tmp_path / "out2")


@pytest.mark.slow
def test_greedy_blocks_match_a_brute_force_search_on_deleted_models(tiny_checkpoints, tmp_path):
    path = tiny_checkpoints["llama"]
    model = ModelSpec(str(path), dtype="float32", device="cpu")
    spec = PruneCurveSpec(PruneSpec(model, ("corpus",), batch_size=2, corpus=CORPUS), methods=("greedy",))
    result = run_prune_curve(spec, tmp_path / "out")
    greedy = result.methods["greedy"]
    assert result.settings["metric"] == {"task": "corpus", "metric": "nll", "higher_is_better": False}
    base64 = tf.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float64).eval()
    windows = corpus_windows(load_model(model, purpose="head"), CORPUS)
    chosen: list[int] = []
    for n in (1, 2):  # the test's own greedy step: every remaining block deleted on top of the chosen ones
        reference = {}
        for block in [b for b in range(4) if b not in chosen]:
            removed = tuple(sorted([*chosen, block]))
            deleted = deleted_span_float64(path, "llama", removed, tmp_path / f"del{n}_{block}")
            reference[removed] = _reference_nll(base64, deleted, windows)
        picked = tuple(greedy.sets[n].blocks)
        assert picked in reference and reference[picked] <= min(reference.values()) + 1e-5
        assert greedy.sets[n].scores["corpus"]["nll"].value == pytest.approx(reference[picked], abs=2e-5)
        chosen = list(picked)
    tokens = sum(len(w.input_ids) for w in windows)
    first = greedy.sets[1].blocks[0]
    # Each step: one full pass (4 blocks), then each set runs only the kept blocks after its first removed one.
    step1 = 4 + sum(3 - b for b in range(4))
    step2 = 4 + sum(2 - min(first, b) for b in range(4) if b != first)
    probes = 2 * 4 * 2  # per step, the engine's one 2-token forward that learns how a block returns its states
    assert greedy.cost["variants_scored"] == 7 and greedy.cost["block_tokens"] == (step1 + step2) * tokens + probes


@pytest.mark.slow
def test_greedy_sublayers_match_a_brute_force_search_on_zeroed_projections(tiny_checkpoints, tmp_path):
    path = tiny_checkpoints["llama"]
    model = ModelSpec(str(path), dtype="float32", device="cpu")
    prune = PruneSpec(model, ("corpus",), batch_size=2, corpus=CORPUS)
    spec = PruneCurveSpec(prune, methods=("greedy", "last"), unit="sublayers", max_fraction=0.25, metric="kl")
    result = run_prune_curve(spec, tmp_path / "out")
    greedy = result.methods["greedy"]
    assert greedy.unit == "sublayer" and sorted(greedy.sets) == [1, 2]  # ⌊0.25 · 2 · 4⌋ sublayers
    assert result.methods["last"].unit == "block" and sorted(result.methods["last"].sets) == [1]
    base64 = tf.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float64).eval()
    windows = corpus_windows(load_model(model, purpose="head"), CORPUS)
    chosen: list[tuple[int, str]] = []
    for n in (1, 2):
        reference = {}
        for unit in [(b, k) for b in range(4) for k in ("attention", "mlp") if (b, k) not in chosen]:
            variant = base64
            for block, kind in [*chosen, unit]:
                variant = zeroed_projections(variant, "llama", kind, block)
            key = tuple(sorted([*chosen, unit]))
            reference[key] = sum(corpus_reference(base64, variant, windows)["kl"]) / len(windows)
        picked = tuple(sorted(greedy.sets[n].sublayers))
        assert greedy.sets[n].blocks == [] and picked in reference
        assert reference[picked] <= min(reference.values()) + 1e-6
        assert greedy.sets[n].scores["corpus"]["kl"].value == pytest.approx(reference[picked], abs=2e-6)
        chosen = list(picked)
    assert greedy.cost["variants_scored"] == 8 + 7
    again = load_result(tmp_path / "out" / "prune_curve.json")
    assert again.to_dict() == result.to_dict()


@pytest.mark.slow
def test_an_lm_eval_metric_drives_delta_and_greedy_as_prune_drop_ranks_it(tiny_checkpoints, tmp_path):
    """delta measured here (simple engine) chooses what prune-drop's own ΔP of the same metric orders."""
    model = ModelSpec(str(tiny_checkpoints["llama"]), dtype="float32", device="cpu")
    prune = PruneSpec(model, ("lp_pydoc_ppl",), limit=3, include_path=str(TASKS_DIR), batch_size=2)
    drop = run_prune_drop(prune, tmp_path / "drop")
    metric = drop.tasks["lp_pydoc_ppl"].metrics["word_perplexity"]
    order = sorted(metric.layers, key=lambda l: (metric.pruned[metric.layers.index(l)], l))  # lower is better
    spec = PruneCurveSpec(prune, methods=("delta", "greedy"), metric="lp_pydoc_ppl:word_perplexity")
    result = run_prune_curve(spec, tmp_path / "curve")
    assert result.settings["metric"]["higher_is_better"] is False
    delta = result.methods["delta"]
    assert {n: s.blocks for n, s in delta.sets.items()} == {n: sorted(order[:n]) for n in (1, 2)}
    assert result.methods["greedy"].sets[1].blocks == [order[0]] and result.methods["greedy"].cost["reused"] == 4
    single = delta.sets[1].scores["lp_pydoc_ppl"]["word_perplexity"].value
    assert single == pytest.approx(metric.pruned[metric.layers.index(order[0])], rel=1e-4)
    from_file = PruneCurveSpec(prune, methods=("delta",), prune_drop=str(tmp_path / "drop" / "prune_drop.json"))
    again = run_prune_curve(from_file, tmp_path / "again")
    assert {n: s.blocks for n, s in again.methods["delta"].sets.items()} == {n: s.blocks for n, s in delta.sets.items()}


@pytest.mark.slow
def test_flip_rates_of_chosen_sets_equal_lm_eval_run_directly_on_physically_pruned_models(
    tiny_checkpoints, tasks_with_generation, tmp_path
):
    path = tiny_checkpoints["llama"]
    spec = PruneCurveSpec(
        prune_spec(path, tasks=("lp_gsm",), limit=8, num_fewshot=None, include_path=str(tasks_with_generation)),
        methods=("last",),
    )
    result = run_prune_curve(spec, tmp_path, loaded=loaded_head(path))
    sets = result.methods["last"].sets
    assert {n: s.blocks for n, s in sets.items()} == {1: [2], 2: [1, 2]}  # the blocks before the final one
    tokenizer = tf.AutoTokenizer.from_pretrained(path)
    models = {(): tf.AutoModelForCausalLM.from_pretrained(path).eval()}
    models |= {tuple(s.blocks): physically_deleted(path, "llama", s.blocks) for s in sets.values()}
    logged = {  # lm-eval itself, on the untouched model and on models rebuilt without the blocks
        removed: lm_eval_reference(
            model, tokenizer, ["lp_gsm"], tasks_dir=tasks_with_generation, limit=8, log_samples=True
        )
        for removed, model in models.items()
    }
    for name, base in result.baseline["lp_gsm"].items():  # the same scores
        key = name if "," in name else f"{name},none"
        assert base.value == logged[()]["results"]["lp_gsm"][key]
        for chosen in sets.values():
            assert chosen.scores["lp_gsm"][name].value == logged[tuple(chosen.blocks)]["results"]["lp_gsm"][key]
    changed = 0
    for chosen in sets.values():
        assert set(chosen.flip_rate["lp_gsm"]) == {"strict-match", "flexible-extract"}
        for filter_name, flips in chosen.flip_rate["lp_gsm"].items():
            answers = {
                removed: {
                    s["doc_id"]: s["filtered_resps"][0] for s in run["samples"]["lp_gsm"] if s["filter"] == filter_name
                }
                for removed, run in logged.items()
            }
            pruned, full = answers[tuple(chosen.blocks)], answers[()]
            count = sum(pruned[d] != full[d] for d in full)
            want = stats.binomtest(count, 8).proportion_ci(confidence_level=0.95, method="wilson")
            assert (flips.flips, flips.documents, flips.rate) == (count, 8, count / 8)
            assert flips.ci95 == pytest.approx([want.low, want.high], abs=1e-12)
            changed += count
    assert changed  # a removal changes some answers: the count can fail
    back = load_result(tmp_path / "prune_curve.json")
    assert back.to_dict() == result.to_dict() and back.methods["last"].sets[2].flip_rate == sets[2].flip_rate
