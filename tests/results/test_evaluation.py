"""An evaluation (one task, one variant: metric values and stderrs) round trips through its JSON form."""

from __future__ import annotations

import json

import pytest

from layerprobe.results.evaluation import Evaluation, MetricScore, evaluation_from_dict, evaluation_to_dict

pytestmark = pytest.mark.usefixtures("no_leaked_figures")


def test_an_evaluation_round_trips_through_its_json_form():
    evaluation = Evaluation(
        {"f1": MetricScore(71.5, 2.25, True, 6), "em": MetricScore(50.0, None, None, 6)}, 0, 6, "simple", 2
    )
    data = json.loads(json.dumps(evaluation_to_dict(evaluation)))
    assert data["metrics"]["em"] == {"value": 50.0, "stderr": None, "higher_is_better": None}
    assert evaluation_from_dict(data) == evaluation
