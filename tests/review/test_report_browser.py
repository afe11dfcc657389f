"""The report in a real browser: headless chromium loads it from disk, runs its script, lays it out at 1,280 px.

Checked in the DOM chromium serialises after the page's scripts ran: every section is there, the page's
own script ran, hovering a heatmap cell shows the cell's text (which equals the JSON's value and
standard error), and nothing is wider than the window. A screenshot must not be blank, and printing
must give a PDF. Without a chromium (Debian: `apt-get install chromium`; .ci/run installs it) these tests
skip and say so.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from headless_chromium import WIDTH, dump_dom, find_chromium, print_pdf, screenshot
from html_pages import body_attributes, expected_title, parse

pytestmark = pytest.mark.browser
SECTIONS = ("provenance", "angular", "prune-drop", "agreement", "prune-curve", "depth", "heal")
# Run after the page's own script: hover one cell of the open run, then record what the page shows.
PROBE = """<script>
window.addEventListener("load", function () {
  var cell = document.getElementById("%(cell)s");
  cell.dispatchEvent(new MouseEvent("mouseover", {bubbles: true}));
  var body = document.body, root = document.documentElement;
  body.setAttribute("data-readout", cell.closest("figure").querySelector("output.readout").textContent);
  body.setAttribute("data-scroll-width", root.scrollWidth);
  body.setAttribute("data-client-width", root.clientWidth);
  body.setAttribute("data-sections", document.querySelectorAll("section").length);
});
</script>"""


@pytest.fixture(scope="module")
def chromium() -> str:
    binary = find_chromium()
    if binary is None:
        pytest.skip("no chromium: install Debian's package (apt-get install chromium) or set LAYERPROBE_CHROMIUM")
    return binary


@pytest.fixture(scope="module")
def page(report_pages):
    return report_pages.several


def probed(page, tmp_path, cell: str, extra: str = ""):
    copy = tmp_path / f"probe-{cell}.html"
    copy.write_text(page.read_text().replace("</body>", PROBE % {"cell": cell} + extra + "</body>"))
    return copy


def test_the_dom_has_every_section_and_the_hover_text_of_the_json(chromium, page, review_runs, tmp_path):
    dom = dump_dom(chromium, probed(page, tmp_path, "run3-cell-1-2"))
    body = body_attributes(dom)
    data = review_runs.raw(3000, "angular")
    want = expected_title(1, 2, data["distance"][1][3], data["distance_stderr"][1][3])
    assert body["data-readout"] == want  # the page's script echoed the hovered cell
    assert parse(dom).cells["run3-cell-1-2"].title == want
    elements = parse(dom).ids
    assert elements["track"] == ("section", "track")
    for i in (1, 2, 3):
        for kind in SECTIONS:
            assert elements[f"run{i}-{kind}"][0] == "section", (i, kind)
    assert int(body["data-sections"]) == 1 + 3 * (1 + len(SECTIONS))
    assert 'data-ready="true"' in dom  # the page's own script ran


def test_nothing_is_wider_than_a_1280_px_window(chromium, page, tmp_path):
    body = body_attributes(dump_dom(chromium, probed(page, tmp_path, "run1-cell-0-1")))
    assert int(body["data-scroll-width"]) <= WIDTH
    assert int(body["data-scroll-width"]) <= int(body["data-client-width"]), "the page scrolls sideways"
    # The measurement itself: a page with a 2,000-px element does overflow.
    wide = probed(page, tmp_path, "run1-cell-0-1", '<div style="width: 2000px">wide</div>')
    assert int(body_attributes(dump_dom(chromium, wide))["data-scroll-width"]) > WIDTH


def test_a_screenshot_is_not_blank(chromium, page, tmp_path):
    from PIL import Image

    png = screenshot(chromium, page, tmp_path / "report.png")
    image = np.asarray(Image.open(png).convert("RGB"))
    assert image.shape[1] == WIDTH and image.shape[0] >= 1000
    assert image.std() > 20  # text, figures and backgrounds, not one flat colour
    colours = np.unique(image.reshape(-1, 3)[::7], axis=0)
    assert len(colours) > 200  # the figures' colour maps and antialiased text
    dark = (image.sum(axis=2) < 200).mean()
    assert 0.002 < dark < 0.5  # some text, not a black page


def test_printing_gives_a_pdf(chromium, page, tmp_path):
    pdf = print_pdf(chromium, page, tmp_path / "report.pdf")
    content = pdf.read_bytes()
    assert content.startswith(b"%PDF") and len(content) > 50_000


def test_chromium_is_found_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("LAYERPROBE_CHROMIUM", str(tmp_path / "none"))
    assert find_chromium() is None
    fake = tmp_path / "browser"
    shutil.copy("/bin/true", fake)
    monkeypatch.setenv("LAYERPROBE_CHROMIUM", str(fake))
    assert find_chromium() == str(fake)
