"""`report` on a run directory with a heal.json: the heal section shows its figure and every value of the file."""

from __future__ import annotations

import pytest
from factories import heal_result
from html_pages import parse

from layerprobe.results import HEAL_METRICS, HEAL_MODELS, RunDir, write_json
from layerprobe.review import write_report


@pytest.mark.slow  # draws the heal figure as SVG
def test_heal_section_has_the_figure_and_the_three_models_with_recovery(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    result = heal_result()
    write_json(RunDir(run).heal_json, result.to_dict())
    page_path = write_report([run], tmp_path / "report.html")
    text = page_path.read_text()
    page = parse(text)
    assert page.ids["run1-heal"] == ("section", "heal")
    section = text[text.index('id="run1-heal"') : text.index("</section>", text.index('id="run1-heal"'))]
    assert "<svg" in section and "healed by linear" in section
    for metric in HEAL_METRICS:
        entry = result.metrics[metric]
        for model in HEAL_MODELS:
            assert f"{entry[model]['value']:.4f}" in section
        rec = entry["recovery"]
        assert f"{rec['value']:.1%} [{rec['ci95'][0]:.1%}, {rec['ci95'][1]:.1%}]" in section
    assert "parameters 1,000 → 800 (80.0%)" in section
    assert "Not measured: no angular.json" in text  # the other sections say what the directory lacks


@pytest.mark.slow  # draws the heal figures as SVG
def test_a_report_of_several_heal_runs_shows_the_heal_history(tmp_path):
    runs = []
    for k, result in enumerate([heal_result(), heal_result(shift=0.2, method="linear+lora", seed=1)]):
        run = tmp_path / f"run{k}"
        run.mkdir()
        write_json(RunDir(run).heal_json, result.to_dict())
        runs.append(run)
    text = write_report(runs, tmp_path / "report.html").read_text()
    start = text.index('<figure class="track-heal">')
    figure = text[start : text.index("</figure>", start)]
    assert "<svg" in figure and "recovery" in figure
