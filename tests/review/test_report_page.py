"""`layerprobe report`: one self-contained page, read back with an HTML parser (the browser tests open it)."""

from __future__ import annotations

import json
import re
import shutil

import pytest
from html_pages import expected_title, parse
from typer.testing import CliRunner

from layerprobe.cli.app import app

runner = CliRunner()
SECTIONS = ("provenance", "angular", "prune-drop", "agreement", "prune-curve", "depth", "heal")


def report(*args):
    return runner.invoke(app, ["report", *map(str, args)])


@pytest.fixture(scope="module")
def pages(report_pages):
    """The page of one run (step 3000) and of all three (given out of order)."""
    assert report_pages.stdout.strip() == f"wrote {report_pages.several}"
    return report_pages.one.read_text(), report_pages.several.read_text()


def test_one_run_has_every_section_and_no_history(pages):
    page = parse(pages[0])
    for kind in SECTIONS:
        assert page.ids[f"run1-{kind}"] == ("section", kind)
    assert "track" not in page.ids and "details" not in page.tags
    assert page.ids["run1"] == ("section", "run") and page.ids["run1-heatmap"][0] == "svg"


def test_every_heatmap_cell_tells_the_json_value_and_standard_error(pages, review_runs):
    data = review_runs.raw(3000, "angular")
    cells = parse(pages[0]).cells
    assert len(cells) == 4 * 5 // 2
    for l in range(4):
        for n in range(1, 4 - l + 1):
            cell = cells[f"run1-cell-{l}-{n}"]
            d, se = data["distance"][l][l + n], data["distance_stderr"][l][l + n]
            assert cell.title == expected_title(l, n, d, se)
            assert float(cell.attrs["data-d"]) == d and float(cell.attrs["data-se"]) == se
    minimum = data["summary"]["most_redundant"]["1"]["layer"]
    assert "minimum" in cells[f"run1-cell-{minimum}-1"].attrs["class"].split()


def test_several_runs_get_the_history_first_then_each_run_in_step_order(pages):
    text = pages[1]
    page = parse(text)
    assert page.ids["track"] == ("section", "track")
    assert text.index('id="track"') < text.index('id="run1"') < text.index('id="run2"') < text.index('id="run3"')
    labels = re.findall(r'<section class="run" id="run\d" data-label="([^"]+)"', text)
    assert labels == ["step 1000", "step 2000", "step 3000"]
    for i in (1, 2, 3):
        for kind in SECTIONS:
            assert page.ids[f"run{i}-{kind}"][0] == "section"
    assert text.count("<details") == 3 and text.count("<details open>") == 1  # the last run is open
    assert text.index("<details open>") > text.index('id="run3"')
    for what in ("lazy", "adjacent", "heat", "scores", "delta", "residual", "grad", "curve"):
        assert f'<figure class="track-{what}"><svg' in text, what
    rows = re.findall(r"<tr><td>(step \d+)</td>", text)
    assert rows == ["step 1000", "step 2000", "step 3000"]
    assert re.findall(r'<li><a href="(#[^"]+)">', text) == ["#track", "#run1", "#run2", "#run3"]


def test_the_page_is_self_contained(pages):
    for text in pages:
        page = parse(text)
        assert "http" not in text and "://" not in text  # no URL anywhere, not even an XML namespace
        assert all(link.startswith(("#", "data:")) for link in page.links), [x for x in page.links if x[:1] != "#"][:3]
        assert "link" not in page.tags and "iframe" not in page.tags and "img" not in page.tags
        assert "<script src" not in text and "@import" not in text
        assert "@media print" in text and 'name="viewport"' in text
        ids = re.findall(r'\bid="([^"]+)"', text)
        assert len(ids) == len(set(ids)), "inlined figures must not share ids"


def test_every_string_from_a_result_is_escaped(review_runs, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(review_runs.by_step[1000], run)
    hostile = '<script>alert("x")</script>'
    for name in ("angular.json", "prune_drop.json", "depth.json", "prune_curve.json"):
        data = json.loads((run / name).read_text())
        data["model"]["id"] = f"org/{hostile}"
        data["model"]["revision"] = '"><img src=x onerror=alert(1)>'
        data["run"]["device"] = "<b>cpu</b>"
        (run / name).write_text(json.dumps(data))
    drop = json.loads((run / "prune_drop.json").read_text())
    drop["tasks"] = {"<i>task</i>": drop["tasks"]["lp_arc_like"]}
    (run / "prune_drop.json").write_text(json.dumps(drop))
    result = report(run, "--out", tmp_path / "page.html", "-q")
    assert result.exit_code == 0, result.output
    text = (tmp_path / "page.html").read_text()
    assert hostile not in text and "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in text
    assert "<img" not in text and "<b>cpu" not in text and "<i>task" not in text
    assert "&lt;i&gt;task&lt;/i&gt;" in text
    assert parse(text).tags.count("script") == 1  # the page's own


def test_bad_inputs_are_one_line_and_status_2(review_runs, tmp_path):
    missing = report(tmp_path / "nope", "--out", tmp_path / "r.html")
    assert missing.exit_code == 2 and "does not exist" in missing.output
    mixed = report(review_runs.by_step[1000], review_runs.other, "--out", tmp_path / "r.html")
    assert mixed.exit_code == 2 and "different models" in mixed.output
    depths = report(review_runs.by_step[1000], review_runs.deep, "--out", tmp_path / "r.html")
    assert depths.exit_code == 2 and "different numbers of blocks" in depths.output
    (tmp_path / "file").write_text("x")
    blocked = report(review_runs.by_step[1000], "--out", tmp_path / "file" / "r.html")
    assert blocked.exit_code == 2 and f"r.html: its folder {tmp_path / 'file'} is a file" in blocked.output
    for result in (missing, mixed, depths, blocked):
        assert "Traceback" not in result.output
    assert not (tmp_path / "r.html").exists()


def test_a_run_missing_kinds_says_so_in_its_sections(review_runs, tmp_path):
    result = report(review_runs.deep, "--out", tmp_path / "deep.html", "-q")
    assert result.exit_code == 0, result.output
    text = (tmp_path / "deep.html").read_text()
    page = parse(text)
    for kind in SECTIONS:
        assert page.ids[f"run1-{kind}"][0] == "section"
    for name in ("prune_drop.json", "prune_curve.json", "depth.json"):
        assert f"Not measured: no {name} in" in text
    assert len(page.cells) == 6 * 7 // 2
