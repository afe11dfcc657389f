"""Reading a report page back in the tests: elements by id, heatmap cells with their hover text, links."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from html.parser import HTMLParser


@dataclass
class Cell:
    attrs: dict[str, str]
    title: str = ""


@dataclass
class Page(HTMLParser):
    """Every element's id, tag and class, each heatmap cell with its <title>, and every src/href value."""

    ids: dict[str, tuple[str, str]] = field(default_factory=dict)  # id → (tag, class)
    cells: dict[str, Cell] = field(default_factory=dict)  # cell id → cell
    links: list[str] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)
    _cell: Cell | None = None
    _in_title: bool = False

    def __post_init__(self) -> None:
        HTMLParser.__init__(self)

    def handle_starttag(self, tag, attrs):
        values = {k: v or "" for k, v in attrs}
        self.tags.append(tag)
        if "id" in values:
            self.ids[values["id"]] = (tag, values.get("class", ""))
        self.links += [v for k, v in values.items() if k in ("src", "href", "xlink:href", "action", "data")]
        if tag == "rect" and "cell" in values.get("class", "").split():
            self._cell = self.cells[values["id"]] = Cell(values)
        if tag == "title" and self._cell is not None:
            self._in_title = True

    def handle_endtag(self, tag):
        if tag == "title":
            self._in_title = False
        if tag == "rect":
            self._cell = None

    def handle_data(self, data):
        if self._in_title and self._cell is not None:
            self._cell.title += data


def parse(text: str) -> Page:
    page = Page()
    page.feed(text)
    page.close()
    return page


def expected_title(start: int, span: int, distance: float, stderr: float) -> str:
    """What a cell's hover text must say, written from the JSON's numbers (4 decimals; the stderr to 2 digits)."""
    return f"d(x^{start}, x^{start + span}) = {distance:.4f} ± {stderr:.2g}"


def body_attributes(dom: str) -> dict[str, str]:
    tag = re.search(r"<body([^>]*)>", dom)
    assert tag, "no <body> in the DOM"
    return dict(re.findall(r'([\w-]+)="([^"]*)"', tag[1]))
