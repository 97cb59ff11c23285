"""The committed H200 reports against the page's budget, measured in headless Chromium at 1400 px.

Each committed report is rendered again from its committed inputs (``tests/data/reports/``, through
``scripts/render_reports.py``, the path that wrote ``reports/<campaign>/h200/``). A copy of the page with
a measuring script appended (the page itself has none) is loaded with ``chromium --dump-dom``; the
script writes what it measured into the DOM, the test reads it back:

- the page height at 1400 px wide, every <details> closed as a reader first sees it;
- then with every <details> open: each SVG <text>'s box inside its <svg>'s box (the viewBox, scaled
  to the page; a text outside it is clipped), and each number in the page's text (a token such as
  ``0.8812``, ``[0.8807,``, ``1,164.2``, ``-2.5%`` or ``1.032x``) laid out on one line.

Budget (the issue's): at most 150 KB of HTML and 15 screens of 1400 x 900 for the full forced run of
the default campaign. Skipped when chromium is not on PATH (CI installs it).
"""

from __future__ import annotations

import html
import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = shutil.which("chromium")
MAX_BYTES = 150_000
SCREEN = (1400, 900)
MAX_SCREENS = 15

MEASURE = r"""
(function () {
  var out = {height: Math.max(document.documentElement.scrollHeight, document.body.scrollHeight),
             width: document.documentElement.scrollWidth, clipped: [], split: [], numbers: 0, texts: 0};
  document.querySelectorAll('details').forEach(function (d) { d.open = true; });
  document.querySelectorAll('svg').forEach(function (svg, i) {
    var box = svg.getBoundingClientRect();
    svg.querySelectorAll('text').forEach(function (t) {
      var r = t.getBoundingClientRect();
      out.texts++;
      if (r.left < box.left - 1 || r.top < box.top - 1 || r.right > box.right + 1 || r.bottom > box.bottom + 1) {
        out.clipped.push([i, t.textContent, Math.round(r.left - box.left), Math.round(r.right - box.right)]);
      }
    });
  });
  var number = /^[\[(]?[-+\u2212]?(\d{1,3}(,\d{3})+|\d+)(\.\d+)?(e[-+]?\d+)?(x|%)?[\]),;:]?$/;
  var walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT), node, m;
  while ((node = walker.nextNode())) {
    if (node.parentNode.closest('svg, script, style')) continue;
    var tokens = /\S+/g;
    while ((m = tokens.exec(node.textContent))) {
      if (!number.test(m[0]) || !/\d/.test(m[0])) continue;
      var range = document.createRange();
      range.setStart(node, m.index);
      range.setEnd(node, m.index + m[0].length);
      var tops = {}, rects = range.getClientRects();
      for (var k = 0; k < rects.length; k++) { if (rects[k].width > 0) tops[Math.round(rects[k].bottom)] = 1; }
      out.numbers++;
      if (Object.keys(tops).length > 1) out.split.push(m[0] + ' in: ' + node.textContent.slice(0, 80));
    }
  }
  var pre = document.createElement('pre');
  pre.id = 'kgate-measured';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
"""


def _renderer():
    spec = importlib.util.spec_from_file_location("render_reports", ROOT / "scripts" / "render_reports.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("render_reports", module)
    spec.loader.exec_module(module)
    return module


def measure(page: Path, tmp: Path) -> dict:
    """Load a measuring copy of ``page`` in headless Chromium at 1400 x 900 and return what it measured."""
    wrapper = page.with_name("_measure.html")
    wrapper.write_text(page.read_text().replace("</body>", f"<script>{MEASURE}</script></body>"))
    cmd = [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           f"--user-data-dir={tmp / 'profile'}", f"--window-size={SCREEN[0]},{SCREEN[1]}",
           "--virtual-time-budget=5000", "--dump-dom", wrapper.as_uri()]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=180, check=False)
    found = re.search(r'<pre id="kgate-measured">(.*?)</pre>', done.stdout, re.S)
    assert found, done.stderr[-2000:]
    return json.loads(html.unescape(found.group(1)))


@pytest.fixture(name="renderer", scope="module")
def _renderer_fixture():
    return _renderer()


@pytest.mark.parametrize("name", [p.stem for p in _renderer().input_files()])
def test_committed_report_is_what_its_inputs_render(renderer, name: str, tmp_path: Path) -> None:
    """The committed report folder is byte for byte what its committed inputs render now."""
    inputs = renderer.load(renderer.INPUTS / f"{name}.json")
    out = renderer.render_into(inputs, tmp_path)
    committed = ROOT / out.relative_to(tmp_path)
    for file in ("index.html", "summary.md", "gates.junit.xml", "verdict.json"):
        assert (out / file).read_bytes() == (committed / file).read_bytes(), f"{committed / file} is stale"


def test_the_default_campaigns_verdict_is_computed_from_its_records(renderer) -> None:
    """The default campaign's verdict is kgate.verdict.compute of the committed records: forced, STOPPED, would be NO-GO."""
    inputs = renderer.load(renderer.INPUTS / "rwkv6-bwd-fusion.h200.json")
    v = inputs.verdict
    assert (v["verdict"], v["would_be"], v["forced"]) == ("STOPPED", "NO-GO", True)
    assert {s["stage"]: s["status"] for s in v["stages"]}["model"] == "fail"
    assert len(inputs.records) == 10


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not on PATH (CI installs it: apt-get install -y chromium)")
@pytest.mark.parametrize("name", ["rwkv6-bwd-fusion.h200", "rwkv6-bwd-fusion-upstream.h200",
                                  "liger-layer-norm-rows.h200"])
def test_page_fits_its_budget_with_no_clipped_text_or_split_number(renderer, name: str, tmp_path: Path) -> None:
    """<= 150 KB, <= 15 screens of 1400 x 900, every SVG text inside its SVG, every number on one line."""
    out = renderer.render_into(renderer.load(renderer.INPUTS / f"{name}.json"), tmp_path / "r")
    page = out / "index.html"
    size = page.stat().st_size
    assert size <= MAX_BYTES, f"{page.name}: {size:,} bytes"
    got = measure(page, tmp_path)
    assert got["width"] <= SCREEN[0], f"the page scrolls sideways: {got['width']} px"
    assert got["height"] <= MAX_SCREENS * SCREEN[1], f"{got['height']:,} px tall at {SCREEN[0]} px wide"
    assert got["texts"] > 10 and got["numbers"] > 200
    assert got["clipped"] == []
    assert got["split"] == []
