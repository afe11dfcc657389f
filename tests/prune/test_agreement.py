"""Agreement of the angular distance with ΔP: Spearman with a bootstrap interval, top-k overlap."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import matplotlib.pyplot as plt
import pytest
from factories import TASKS_DIR, angular_from_adjacent, loaded_head, metric_drop, model_info, prune_drop_result
from typer.testing import CliRunner

from layerprobe.cli.app import app
from layerprobe.cli.summaries import print_agreement
from layerprobe.core.errors import ResultError
from layerprobe.model.info import model_info as info_of
from layerprobe.model.stack import find_layers
from layerprobe.plots.delta import prune_drop_figure
from layerprobe.prune.agreement import (
    angular_model_mismatch,
    default_k,
    find_angular,
    load_angular_for,
    metric_agreement,
    task_agreement,
)
from layerprobe.results import ModelInfo, agreement_distances, agreement_span, write_json
from layerprobe.review.sections import agreement_body


def drop(deltas, higher_is_better=True, layers=None):
    """ΔP of `deltas` from a baseline of 0.5."""
    return metric_drop(0.5, [0.5 + d for d in deltas], hib=higher_is_better, layers=layers)


def hand_spearman(x, y):
    def avg_ranks(v):
        return [1 + sum(u < a for u in v) + (sum(u == a for u in v) - 1) / 2 for a in v]

    rx, ry = avg_ranks(x), avg_ranks(y)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    num = sum((a - mx) * (b - my) for a, b in zip(rx, ry, strict=True))
    return num / math.sqrt(sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry))


Z = 1.959963984540054


def test_agreement_fields_against_a_hand_computation():
    adjacent = [0.40, 0.10, 0.30, 0.05, 0.20, 0.35, 0.15, 0.25]
    deltas = [-0.30, -0.01, -0.20, 0.00, -0.05, -0.28, -0.02, -0.10]  # bigger turn, bigger loss: agree
    got = metric_agreement(adjacent, drop(deltas))
    assert got["spearman"] == pytest.approx(hand_spearman(adjacent, deltas), abs=1e-12)
    assert got["spearman"] < -0.8 and got["agree_when"] == "negative"
    low, high = got["spearman_ci95"]
    assert low <= got["spearman"] <= high and high < 0
    assert got["top_k"] == default_k(8) == 2
    assert got["most_redundant_by_distance"] == [3, 1] and got["least_harmful_by_delta"] == [3, 1]
    assert got["top_k_overlap"] == 1.0
    assert got["span_distance"] == adjacent and got["span"] == 1 and got["interval"] == "fisher_z_bonett_wright"
    # Fisher's z with Bonett and Wright's standard error, computed here directly.
    assert got["spearman"] == -1.0 and (low, high) == (-1.0, -1.0)  # a perfect ρ: the interval is the point
    noisy = metric_agreement(adjacent, drop([-0.30, -0.01, -0.20, 0.00, -0.05, -0.02, -0.28, -0.10]))
    rho, (low, high) = noisy["spearman"], noisy["spearman_ci95"]
    z, se = math.atanh(rho), math.sqrt((1 + rho**2 / 2) / (8 - 3))
    assert (low, high) == pytest.approx((math.tanh(z - Z * se), math.tanh(z + Z * se)), abs=1e-12)
    assert low <= rho <= high and -1 < rho < -0.5
    assert got["distinct"] == [8, 8] and got["informative"] is True
    # A perplexity-like metric: a larger ΔP is the loss, so the measures agree when rho is positive.
    ppl = metric_agreement(adjacent, drop([-d for d in deltas], higher_is_better=False))
    assert ppl["agree_when"] == "positive" and ppl["spearman"] == pytest.approx(-got["spearman"], abs=1e-12)
    assert ppl["least_harmful_by_delta"] == [3, 1]


def test_only_removed_blocks_with_finite_values_are_compared():
    adjacent = [0.4, float("nan"), 0.3, 0.1]
    got = metric_agreement(adjacent, drop([-0.2, -0.1, float("inf")], layers=[0, 1, 2]))
    assert got["layers"] == [0] and got["spearman"] is None and got["spearman_ci95"] is None
    assert got["top_k"] == 1 and got["top_k_overlap"] == 1.0


def test_finding_and_checking_the_angular_file(tmp_path):
    assert find_angular(None, tmp_path) is None
    path = write_json(tmp_path / "angular.json", angular_from_adjacent([0.3, 0.1, 0.2, 0.4]).to_dict())
    assert find_angular(None, tmp_path) == path
    assert find_angular("elsewhere/angular.json", tmp_path) == Path("elsewhere/angular.json")  # given wins
    assert load_angular_for(path, 4).num_layers == 4
    with pytest.raises(ResultError, match="measured 4 blocks; this model has 6"):
        load_angular_for(path, 6)
    block = task_agreement(load_angular_for(path, 4), {"acc": drop([-0.3, 0.0, -0.1, -0.4])}, str(path))
    assert block["acc"]["angular"] == str(path) and block["acc"]["span_distance"] == [0.3, 0.1, 0.2, 0.4]
    assert block["acc"]["spearman"] == pytest.approx(-1.0)


def measured_by(path) -> ModelInfo:
    """The model block an angular run of the checkpoint at `path` records."""
    loaded = loaded_head(path)
    return info_of(loaded, find_layers(loaded.model))


@pytest.mark.slow  # over 3 s on 2 cores: the default tier stays under 3 minutes
def test_cli_finds_angular_json_in_out_prints_agreement_and_logs_samples(tiny_checkpoints, tmp_path):
    tasks = TASKS_DIR
    same = dataclasses.replace(
        angular_from_adjacent([0.3, 0.1, 0.2, 0.4]), model=measured_by(tiny_checkpoints["llama"])
    )
    write_json(tmp_path / "angular.json", same.to_dict())
    args = ["prune-drop", str(tiny_checkpoints["llama"]), "--task", "lp_arc_like", "--include-path", str(tasks)]
    args += ["--limit", "4", "--batch-size", "4", "--device", "cpu", "--quiet", "--engine", "simple"]
    done = CliRunner().invoke(app, [*args, "--out", str(tmp_path), "--log-samples"], env={"COLUMNS": "250"})
    assert done.exit_code == 0, done.output
    assert "agreement with angular: Spearman ρ(d(x^l, x^(l+1)), ΔP acc)" in done.output
    assert "paired 95 % CI" in done.output
    data = json.loads((tmp_path / "prune_drop.json").read_text())
    block = data["tasks"]["lp_arc_like"]["agreement"]["acc"]
    assert block["angular"] == str(tmp_path / "angular.json") and block["layers"] == [0, 1, 2, 3]
    assert data["summary"]["lp_arc_like"]["agreement"] == block
    lines = (tmp_path / "samples" / "lp_arc_like.jsonl").read_text().splitlines()
    assert len(lines) == 5 * 4  # baseline and 4 blocks, 4 documents each

    other = tmp_path / "deep.json"
    write_json(other, angular_from_adjacent([0.1] * 6).to_dict())
    refused = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "x"), "--angular", str(other)])
    assert refused.exit_code == 2 and "measured 6 blocks; this model has 4" in refused.output

    # Another model with the same number of blocks: refused when given, withheld (one line) when found in --out.
    foreign = angular_from_adjacent([0.3, 0.1, 0.2, 0.4], model_id="org/another")
    write_json(tmp_path / "foreign.json", foreign.to_dict())
    refused = CliRunner().invoke(
        app, [*args, "--out", str(tmp_path / "y"), "--angular", str(tmp_path / "foreign.json")]
    )
    assert refused.exit_code == 2 and "Traceback" not in refused.output
    assert f"{tmp_path / 'foreign.json'} measured another model (model org/another" in " ".join(refused.output.split())
    assert not (tmp_path / "y" / "prune_drop.json").exists()
    write_json(tmp_path / "z" / "angular.json", foreign.to_dict())
    withheld = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "z")])
    assert withheld.exit_code == 0, withheld.output
    assert "measured another model" in withheld.output and "no agreement with it is recorded" in withheld.output
    assert "agreement with angular" not in withheld.output
    assert json.loads((tmp_path / "z" / "prune_drop.json").read_text())["tasks"]["lp_arc_like"].get("agreement") is None

    # An angular.json of a deeper model found in --out (e.g. an earlier run of another model there): withheld too.
    write_json(tmp_path / "w" / "angular.json", angular_from_adjacent([0.1] * 6).to_dict())
    deeper = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "w")])
    assert deeper.exit_code == 0, deeper.output
    assert "6 blocks, this model 4" in " ".join(deeper.output.split())
    assert json.loads((tmp_path / "w" / "prune_drop.json").read_text())["tasks"]["lp_arc_like"].get("agreement") is None


def test_the_model_of_an_angular_result_is_matched_by_fingerprint_else_by_id():
    base = model_info(4, weights_fingerprint="sha256:aaaa")
    assert angular_model_mismatch(base, base) is None
    copy = dataclasses.replace(base, id="/local/copy")  # the same weights under another name
    assert angular_model_mismatch(copy, base) is None
    tuned = dataclasses.replace(base, weights_fingerprint="sha256:bbbb")  # same id, other weights
    assert "weights fingerprint" in angular_model_mismatch(tuned, base)
    deeper = dataclasses.replace(base, num_layers=6)  # same fingerprint cannot have more blocks, but the count decides
    assert "6 blocks, this model 4" in angular_model_mismatch(deeper, base)
    older = dataclasses.replace(base, id="org/other", weights_fingerprint=None)  # no fingerprint: the id decides
    assert "model org/other" in angular_model_mismatch(older, base)
    assert angular_model_mismatch(dataclasses.replace(base, weights_fingerprint=None), base) is None
    assert "architecture" in angular_model_mismatch(dataclasses.replace(base, architecture="GPT2LMHeadModel"), base)


def test_a_span_run_compares_and_labels_the_span_distance(tmp_path, capsys):
    angular = angular_from_adjacent([0.3, 0.1, 0.2, 0.4])
    path = write_json(tmp_path / "angular.json", angular.to_dict())
    block = task_agreement(load_angular_for(path, 4), {"acc": drop([-0.3, 0.0, -0.1], layers=[0, 1, 2])}, "a", span=2)
    want = [angular.distance[l][l + 2] for l in range(3)]
    assert block["acc"]["span"] == 2 and block["acc"]["span_distance"] == want
    assert "adjacent_distance" not in block["acc"]
    result = prune_drop_result(
        {"arc": {"acc": drop([-0.3, 0.0, -0.1], layers=[0, 1, 2])}},
        limit=None,
        model=model_info(4),
        agreement=block,
        settings={"span": 2, "unit": "block"},
    )
    print_agreement("acc", block["acc"], agreement_span(block["acc"], result.settings))
    assert "Spearman ρ(d(x^l, x^(l+2)), ΔP acc)" in capsys.readouterr().out
    fig = prune_drop_figure(result, "arc")
    try:
        assert fig.axes[1].get_ylabel() == r"$d(x^l,\,x^{l+2})$"
        assert list(fig.axes[1].get_lines()[0].get_ydata()) == want
    finally:
        plt.close(fig)
    assert "d(x^l, x^(l+2))" in agreement_body(result)
    # A file written before the field was renamed: its adjacent_distance is still read (span from settings).
    old = {k: v for k, v in block["acc"].items() if k not in ("span", "span_distance")}
    old["adjacent_distance"] = want
    assert agreement_distances(old) == want and agreement_span(old, result.settings) == 2


def test_heavily_tied_deltas_get_an_interval_around_rho_and_are_called_uninformative():
    """A prune-drop on 6 blocks with --limit 100: many equal ΔP. The bootstrap gave +0.65 [+0.66, +0.96]."""
    adjacent = [0.30, 0.12, 0.10, 0.11, 0.09, 0.25]
    deltas = [-0.05, 0.0, 0.0, 0.0, 0.0, -0.01]
    got = metric_agreement(adjacent, drop(deltas, layers=list(range(6))))
    low, high = got["spearman_ci95"]
    assert low <= got["spearman"] <= high and -1 <= low and high <= 1
    assert got["distinct"] == [6, 3] and got["informative"] is False
