"""What every rule's verdict says besides pass or fail: notes on runs that measured different things."""

from __future__ import annotations

from factories import angular_from_adjacent, arc_acc_result

from layerprobe.gate import GateRules
from layerprobe.gate.verdict import compare_results


def test_notes_say_when_the_runs_measured_different_things():
    notes = compare_results(
        angular_from_adjacent([0.5, 0.4, 0.3]),
        angular_from_adjacent([0.5, 0.4, 0.3], tokens=512, positions="last"),
        GateRules(),
    )
    assert "data.tokens differs: baseline 4096, candidate 512" in notes.notes
    assert "data.positions differs: baseline 'all', candidate 'last'" in notes.notes
    pd = compare_results(
        arc_acc_result(0.7), arc_acc_result(0.7, version="2.0", limit=20.0, num_fewshot=5), GateRules()
    ).notes
    assert "arc: version differs: baseline '1.0', candidate '2.0'" in pd
    assert "arc: limit differs: baseline None, candidate 20.0" in pd
    assert "arc: num_fewshot differs: baseline 0, candidate 5" in pd
    unknown = compare_results(arc_acc_result(0.7), arc_acc_result(0.7, version=None), GateRules()).notes
    assert not [note for note in unknown if "version" in note]  # an unknown version is not a change
