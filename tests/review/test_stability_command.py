"""`layerprobe stability`: every number of stability.json against an independent computation.

Scores and rankings are read back from the source files themselves (the angular summary's adjacent
distances; ±ΔP of prune_drop.json); τ and ρ are scipy's on those scores; the Jaccard curve is built
from sets; the bootstrap intervals are recomputed here from the per-window rows of angular.json and the
per-document rows of samples/<task>.jsonl, with the same seeded generator calls, and scipy per draw.
"""

import json

import numpy as np
import pytest
from factories.stability import SEQ, angular_run
from reference import chance_by_enumeration
from scipy import stats
from typer.testing import CliRunner

from layerprobe.cli.app import app
from layerprobe.core import LayerprobeError, ResultError
from layerprobe.results import StabilityResult, read_json
from layerprobe.review import stability
from layerprobe.stats.ranking import CHUNK

DRAWS, SEED = 200, 7
runner = CliRunner()


def source_scores(path, metric=None):
    """Per block, lower = more prunable, straight from the file."""
    data = json.loads(path.read_text())
    if data["schema"].startswith("layerprobe/angular"):
        return data["summary"]["adjacent"]
    task = next(iter(data["tasks"].values()))
    name = metric or next(iter(task["metrics"]))
    found = task["metrics"][name]
    sign = -1.0 if found["higher_is_better"] else 1.0
    return [sign * d for d in found["delta"]]


def ranking(scores):
    return sorted(range(len(scores)), key=lambda b: (scores[b], b))


def redraw_windows(rng, rows, weights, draws):
    """The ratio bootstrap of per-unit rows, with the generator called as ranking.py calls it."""
    rows, weights = np.asarray(rows, dtype=float), np.asarray(weights, dtype=float)
    n, out = len(rows), []
    for start in range(0, draws, CHUNK):
        for counts in rng.multinomial(n, np.full(n, 1 / n), size=min(CHUNK, draws - start)):
            out.append((counts * weights) @ rows / (counts * weights).sum())
    return np.array(out)


def units_of(path, metric=None):
    """(rows, weights) of a file: angular per-window rows, or per-document loss differences from samples/."""
    data = json.loads(path.read_text())
    if data["schema"].startswith("layerprobe/angular"):
        return data["adjacent_windows"], data["window_positions"]
    ((task_name, task),) = data["tasks"].items()
    name = metric or next(iter(task["metrics"]))
    sign = -1.0 if task["metrics"][name]["higher_is_better"] else 1.0
    rows = [json.loads(line) for line in (path.parent / "samples" / f"{task_name}.jsonl").read_text().splitlines()]
    base = {(r["task"], r["doc_id"]): r[name] for r in rows if r["variant"] is None}
    by_block = {}
    for r in rows:
        if r["variant"] is not None:
            by_block.setdefault(r["variant"], {})[(r["task"], r["doc_id"])] = r[name]
    table = [[sign * (by_block[b][doc] - value) for b in sorted(by_block)] for doc, value in base.items()]
    return table, [1.0] * len(table)


def interval(values):
    finite = np.asarray(values)[np.isfinite(values)]
    return list(np.percentile(finite, [2.5, 97.5]))


def jaccard(x, y, k):
    a, b = set(ranking(x)[:k]), set(ranking(y)[:k])
    return len(a & b) / len(a | b)


def test_every_number_of_a_mixed_comparison(stability_runs):
    paths = [stability_runs["pydoc"], stability_runs["notes"], stability_runs["corpus"]]
    result = stability(paths, draws=DRAWS, seed=SEED)
    blocks = list(range(6))
    assert result.blocks == blocks and result.ks == [1, 2, 3]
    scores = [source_scores(p) for p in paths]
    for item, expected, path in zip(result.inputs, scores, paths, strict=True):
        assert item.scores == expected and item.ranking == ranking(expected) and item.path == str(path)
        assert item.resampled == ("documents" if item.kind == "prune_drop" else "windows") and item.note is None
    assert [i.label for i in result.inputs] == ["pydoc", "notes", "corpus"]
    assert [(i.kind, i.task, i.metric) for i in result.inputs][2] == ("prune_drop", "corpus", "nll")
    assert [(p.first, p.second) for p in result.pairs] == [(0, 1), (0, 2), (1, 2)]
    for pair in result.pairs:
        x, y = scores[pair.first], scores[pair.second]
        assert pair.kendall_tau_b == pytest.approx(stats.kendalltau(x, y).statistic, abs=1e-12)
        assert pair.spearman_rho == pytest.approx(stats.spearmanr(x, y).statistic, abs=1e-12)
        assert pair.jaccard_lowest_k == pytest.approx([jaccard(x, y, k) for k in (1, 2, 3)], abs=1e-15)
        assert pair.method == "bootstrap"
        # The intervals: each side redrawn from its own units, first side first, from one seeded generator.
        rng = np.random.default_rng(SEED)
        first = redraw_windows(rng, *units_of(paths[pair.first]), DRAWS)
        second = redraw_windows(rng, *units_of(paths[pair.second]), DRAWS)
        taus = [stats.kendalltau(a, b).statistic for a, b in zip(first, second, strict=True)]
        rhos = [stats.spearmanr(a, b).statistic for a, b in zip(first, second, strict=True)]
        assert pair.kendall_tau_b_ci95 == pytest.approx(interval(taus), abs=1e-12)
        assert pair.spearman_rho_ci95 == pytest.approx(interval(rhos), abs=1e-12)
        for k in (1, 2, 3):
            overlaps = [jaccard(a, b, k) for a, b in zip(first, second, strict=True)]
            assert pair.jaccard_lowest_k_ci95[k - 1] == pytest.approx(interval(overlaps), abs=1e-12)
    chance = [chance_by_enumeration(6, k) for k in (1, 2, 3)]
    assert result.jaccard_chance == pytest.approx(chance, rel=1e-12)
    assert result.settings == {"draws": DRAWS, "seed": SEED, "confidence": 0.95, "task": None, "metric": None}
    assert result.model.num_layers == 6 and result.notes == []


def test_the_metric_sets_the_direction(stability_runs):
    nll = stability([stability_runs["pydoc"], stability_runs["corpus"]], draws=20).inputs[1]
    top1 = stability([stability_runs["pydoc"], stability_runs["corpus"]], metric="top1_agreement", draws=20).inputs[1]
    assert nll.higher_is_better is False and nll.scores == source_scores(stability_runs["corpus"])  # +ΔP: loss grows
    assert top1.higher_is_better is True and top1.metric == "top1_agreement"
    assert top1.scores == source_scores(stability_runs["corpus"], "top1_agreement")  # −ΔP: agreement lost
    assert all(s >= 0 for s in top1.scores)  # removing a block never raises agreement with the full model


def test_the_fallback_is_parametric_and_labelled(stability_runs, tmp_path):
    result = stability([stability_runs["pydoc"], stability_runs["nosamples"]], draws=DRAWS, seed=SEED)
    item = result.inputs[1]
    assert item.resampled == "stderr" and item.units is None
    assert "no per-document values" in item.note and "--log-samples" in item.note and "parametric" in item.note
    assert result.pairs[0].method == "mixed_bootstrap"
    assert any(note.startswith("nosamples: no per-document values") for note in result.notes)
    # Redrawn from N(ΔP-loss, delta_stderr²), after the angular side's windows, from the one generator.
    data = json.loads(stability_runs["nosamples"].read_text())["tasks"]["corpus"]["metrics"]["nll"]
    rng = np.random.default_rng(SEED)
    first = redraw_windows(rng, *units_of(stability_runs["pydoc"]), DRAWS)
    second = rng.normal(item.scores, data["delta_stderr"], size=(DRAWS, 6))
    taus = [stats.kendalltau(a, b).statistic for a, b in zip(first, second, strict=True)]
    assert result.pairs[0].kendall_tau_b_ci95 == pytest.approx(interval(taus), abs=1e-12)

    old = json.loads(stability_runs["pydoc"].read_text())  # an angular.json from before the per-window fields
    del old["adjacent_windows"], old["window_positions"]
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "angular.json").write_text(json.dumps(old))
    both = stability([tmp_path / "old" / "angular.json", stability_runs["nosamples"]], draws=20)
    assert both.pairs[0].method == "parametric_bootstrap"
    assert both.inputs[0].note.startswith("no per-window distances")


def test_values_that_do_not_reproduce_the_file_are_not_used(stability_runs, tmp_path):
    data = json.loads(stability_runs["corpus"].read_text())
    metric = data["tasks"]["corpus"]["metrics"]["nll"]
    metric["pruned"] = [metric["baseline"]] * len(metric["pruned"])  # every ΔP 0: ties everywhere
    metric["delta_ci95"] = [[-1.0, 1.0]] * len(metric["pruned"])  # intervals that hold the edited ΔP
    out = tmp_path / "edited"
    (out / "samples").mkdir(parents=True)
    (out / "prune_drop.json").write_text(json.dumps(data))
    (out / "samples" / "corpus.jsonl").write_text(
        (stability_runs["corpus"].parent / "samples" / "corpus.jsonl").read_text()
    )
    result = stability([stability_runs["pydoc"], out / "prune_drop.json"], draws=20)
    assert "do not reproduce the recorded scores" in result.inputs[1].note
    assert result.pairs[0].kendall_tau_b is None and result.pairs[0].spearman_rho is None
    assert any("all 6 blocks score the same" in note for note in result.notes)
    assert result.inputs[1].ranking == list(range(6))  # ties: the lower block first


@pytest.fixture(scope="module")
def other_models(stability_models, tmp_path_factory):
    root = tmp_path_factory.mktemp("stability-models")
    names = ("llama_copy", "llama_other", "gpt2", "llama_deep")
    return {name: angular_run(stability_models[name], root / name, tokens=4 * SEQ) for name in names}


def test_one_model_means_architecture_blocks_and_id_or_fingerprint(stability_runs, other_models, tmp_path):
    copy = stability([stability_runs["pydoc"], other_models["llama_copy"]], draws=20)  # another path, the same files
    assert copy.inputs[0].model_id != copy.inputs[1].model_id
    assert copy.inputs[0].weights_fingerprint == copy.inputs[1].weights_fingerprint is not None
    refusals = {
        "llama_deep": "(6 vs 8 blocks)",
        "gpt2": "(LlamaForCausalLM vs GPT2LMHeadModel)",
        "llama_other": "and their weights fingerprints differ",
    }
    for name, reason in refusals.items():
        with pytest.raises(LayerprobeError, match="are results of different models") as refused:
            stability([stability_runs["pydoc"], other_models[name]], draws=20)
        assert reason in refused.value.message and "\n" not in refused.value.message
    old = json.loads(other_models["llama_copy"].read_text())
    del old["model"]["weights_fingerprint"]  # an older file: another id and nothing to match the weights by
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "angular.json").write_text(json.dumps(old))
    with pytest.raises(LayerprobeError, match="no weights fingerprint shows they are the same checkpoint"):
        stability([stability_runs["pydoc"], tmp_path / "old" / "angular.json"], draws=20)


def test_inputs_that_cannot_be_compared_are_refused(stability_runs, tmp_path):
    with pytest.raises(LayerprobeError, match="two or more results; got 1"):
        stability([stability_runs["pydoc"]])
    with pytest.raises(LayerprobeError, match="--draws must be at least 2"):
        stability([stability_runs["pydoc"], stability_runs["notes"]], draws=1)
    with pytest.raises(LayerprobeError, match="has no metric of task corpus 'acc'"):
        stability([stability_runs["pydoc"], stability_runs["corpus"]], metric="acc")
    with pytest.raises(LayerprobeError, match="has no task 'mmlu'"):
        stability([stability_runs["pydoc"], stability_runs["corpus"]], task="mmlu")
    data = json.loads(stability_runs["corpus"].read_text())
    data["settings"]["span"] = 2
    (tmp_path / "span.json").write_text(json.dumps(data))
    with pytest.raises(LayerprobeError, match="--span 2 ranks other things than single blocks"):
        stability([stability_runs["pydoc"], tmp_path / "span.json"])
    with pytest.raises(ResultError, match="No result file"):
        stability([stability_runs["pydoc"], tmp_path / "missing.json"])


@pytest.mark.slow  # over 3 s on 2 cores: the default tier stays under 3 minutes
def test_the_command_writes_json_markdown_and_plots(stability_runs, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    paths = [str(stability_runs[name]) for name in ("pydoc", "notes", "last", "corpus", "nosamples")]
    done = runner.invoke(app, ["stability", *paths, "--draws", "50"])
    assert done.exit_code == 0, done.output
    (out,) = (tmp_path / "layerprobe-out").iterdir()  # ./layerprobe-out/<model>/, as every command
    assert out.name == "llama"
    assert sorted(p.name for p in out.iterdir()) == ["stability.json", "stability.md", "stability.pdf", "stability.png"]
    written = read_json(out / "stability.json")
    assert written["schema"] == "layerprobe/stability@1" and len(written["pairs"]) == 10
    result = StabilityResult.from_dict(written, "stability.json")
    assert result.to_dict() == json.loads(json.dumps(written))
    again = stability(paths, draws=50)  # the library call gives the same numbers
    assert [p.kendall_tau_b_ci95 for p in again.pairs] == [p.kendall_tau_b_ci95 for p in result.pairs]
    text = " ".join(done.output.split())
    assert "pydoc vs notes" in text and "Kendall τ-b [95 %]" in text and "nosamples (mixed_bootstrap)" in text
    assert "note: nosamples: no per-document values" in text
    markdown = (out / "stability.md").read_text()
    assert "| pydoc vs notes |" in markdown and "## Overlap of the k most prunable blocks" in markdown
    assert f"{result.pairs[0].kendall_tau_b:.2f}" in markdown
    refused = runner.invoke(app, ["stability", paths[0], str(tmp_path / "nothing.json")])
    assert refused.exit_code == 2 and "No result file" in refused.output


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.__setitem__("schema", "layerprobe/angular@1"), "expected a layerprobe/stability@1 result"),
        (lambda d: d["pairs"].pop(), "pairs must be one entry per pair of the 3 inputs"),
        (lambda d: d["inputs"][0]["scores"].pop(), r"inputs\[0\].scores must be an array of 6 numbers"),
        (lambda d: d["inputs"][1].__setitem__("ranking", [0, 0, 1, 2, 3, 4]), r"inputs\[1\].ranking must be"),
        (lambda d: d["inputs"][1].__setitem__("resampled", "coins"), r"inputs\[1\].resampled must be"),
        (lambda d: d["pairs"][0].__setitem__("kendall_tau_b", 1.5), r"pairs\[0\].kendall_tau_b must be a number in"),
        (lambda d: d["pairs"][0]["jaccard_lowest_k"].pop(), r"pairs\[0\].jaccard_lowest_k must be an array of 3"),
        (lambda d: d["pairs"][2].__setitem__("method", "guess"), r"pairs\[2\].method must be"),
        (lambda d: d.__setitem__("blocks", [0, 1, 2, 3, 4, 9]), "blocks must be distinct ascending block indices"),
        (lambda d: d["jaccard_chance"].pop(), "jaccard_chance must be an array of 3 numbers"),
        (lambda d: d["settings"].__setitem__("draws", 1), r"settings.draws must be an integer ≥ 2"),
    ],
)
def test_stability_json_is_validated_on_read(stability_runs, change, message):
    data = json.loads(
        json.dumps(
            stability([stability_runs["pydoc"], stability_runs["notes"], stability_runs["corpus"]], draws=20).to_dict()
        )
    )
    StabilityResult.from_dict(data)  # the real one reads back
    change(data)
    with pytest.raises(ResultError, match=message):
        StabilityResult.from_dict(data, "stability.json")


def test_labels_name_each_input_by_its_directory():
    from pathlib import Path

    from layerprobe.review import unique_labels

    assert unique_labels([Path("stability_runs/c4/angular.json"), Path("stability_runs/wiki/angular.json")]) == [
        "c4",
        "wiki",
    ]
    same_dir = [Path("stability_runs/c4/angular.json"), Path("stability_runs/c4/prune_drop.json")]
    assert unique_labels(same_dir) == ["c4/angular", "c4/prune_drop"]
    deeper = [Path("a/x/angular.json"), Path("b/x/angular.json")]
    assert unique_labels(deeper) == ["a/x/angular", "b/x/angular"]
    twice = [Path("stability_runs/c4/angular.json")] * 2
    assert unique_labels(twice) == ["stability_runs/c4/angular#1", "stability_runs/c4/angular#2"]
