"""The report's one stylesheet and one script, inlined into the page: it must open with no network.

The layout fits a 1,280-px-wide screen (content at most 1,240 px, figures scaled to their column, wide
tables scrolling inside their own box so the page never scrolls sideways) and prints readably (no
navigation, every run opened, sections kept whole, black on white). The script echoes a heatmap cell's
value under its map on hover or focus, and opens every run before printing.
"""

STYLE = """
:root { --ink: #1d1d1f; --muted: #5f6368; --line: #d9d9de; --accent: #1f4e79; --paper: #ffffff; }
* { box-sizing: border-box; }
html { -webkit-text-size-adjust: 100%; }
body { margin: 0; background: #f5f6f8; color: var(--ink);
  font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; }
header.page, main, footer { max-width: 1240px; margin: 0 auto; padding: 0 20px; }
header.page { padding-top: 18px; }
h1 { font-size: 1.6em; margin: 0.2em 0; }
h2 { font-size: 1.3em; margin: 0; }
h3 { font-size: 1.05em; margin: 1.1em 0 0.4em; color: var(--accent); }
p.lede, .muted { color: var(--muted); }
nav ul { list-style: none; padding: 0; margin: 0.6em 0; display: flex; flex-wrap: wrap; gap: 6px 14px; }
nav a { color: var(--accent); }
section.run, section.track { background: var(--paper); border: 1px solid var(--line); border-radius: 8px;
  padding: 14px 18px; margin: 16px 0; }
details > summary { cursor: pointer; list-style-position: outside; }
details > summary h2 { display: inline; }
.grid { display: grid; grid-template-columns: repeat(auto-fit, minmax(520px, 1fr)); gap: 12px 20px;
  align-items: start; }
figure { margin: 0; min-width: 0; }
figcaption { color: var(--muted); font-size: 0.85em; }
svg.figure, svg.heatmap { display: block; width: 100%; height: auto; }
svg.heatmap text { font-size: 11px; fill: var(--ink); }
svg.heatmap rect.cell:hover, svg.heatmap rect.cell:focus { stroke: #000; stroke-width: 2; }
output.readout { display: block; min-height: 1.5em; font-family: ui-monospace, "DejaVu Sans Mono", monospace; }
.scroll { overflow-x: auto; max-width: 100%; }
table { border-collapse: collapse; font-size: 0.9em; margin: 0.4em 0; }
th, td { border-bottom: 1px solid var(--line); padding: 3px 8px; text-align: left; vertical-align: top; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
td.num { white-space: nowrap; }
dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: 2px 14px; margin: 0.4em 0; }
dl.facts dt { color: var(--muted); }
dl.facts dd { margin: 0; }
.path, dd { overflow-wrap: anywhere; }
td { overflow-wrap: break-word; }
table.track-table td:first-child, td.file { white-space: nowrap; }
table.track-table th { vertical-align: bottom; }
table.track-table td:nth-child(2) { overflow-wrap: anywhere; min-width: 14em; }
.missing { color: var(--muted); font-style: italic; }
ul.notes { color: var(--muted); font-size: 0.9em; }
@media print {
  body { background: #fff; font-size: 10pt; }
  nav, output.readout { display: none; }
  header.page, main, footer { max-width: none; padding: 0; }
  section.run, section.track { border: none; padding: 0; margin: 0 0 12pt; break-before: page; }
  section.track:first-child { break-before: auto; }
  figure, table, svg { break-inside: avoid; }
  .grid { display: block; }
  .scroll { overflow: visible; }
  table { font-size: 7.5pt; width: 100%; }
  td.num, table.track-table td:first-child, td.file { white-space: normal; }
  table.track-table td:nth-child(2) { min-width: 0; }
  a { color: inherit; text-decoration: none; }
}
"""

SCRIPT = """
(function () {
  function echo(event) {
    var cell = event.target.closest ? event.target.closest("rect.cell") : null;
    if (!cell) { return; }
    var map = cell.closest("figure");
    var out = map ? map.querySelector("output.readout") : null;
    var title = cell.querySelector("title");
    if (out && title) { out.textContent = title.textContent; }
  }
  document.addEventListener("mouseover", echo);
  document.addEventListener("focusin", echo);
  window.addEventListener("beforeprint", function () {
    document.querySelectorAll("details").forEach(function (d) { d.open = true; });
  });
  document.documentElement.setAttribute("data-ready", "true");
})();
"""
