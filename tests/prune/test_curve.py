"""prune-curve: Gromov's span choice from a given angular matrix, and its scores vs physically deleted spans."""

from __future__ import annotations

import pytest
import torch
import transformers as tf
from factories import banded_distances
from reference import corpus_reference, deleted_span_float64

from layerprobe.core import BUILTIN_CORPUS, AngularSpec, CorpusSpec, ModelSpec, PruneSpec
from layerprobe.core.errors import LayerprobeError
from layerprobe.evaluate.corpus_metric import corpus_windows
from layerprobe.measure.angular import run_angular
from layerprobe.model.load import load_model
from layerprobe.prune.curve import PruneCurveSpec, choose_spans, gromov_start, run_prune_curve
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
    spec = PruneCurveSpec(PruneSpec(model, ("corpus",), batch_size=2, corpus=CORPUS), max_fraction=0.5)
    result = run_prune_curve(spec, tmp_path, angular=str(tmp_path / "angular.json"))
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
