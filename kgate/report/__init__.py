"""The report layer: a verdict and its stage records rendered as index.html, summary.md and gates.junit.xml.

``render`` (``kgate.report.outputs``) is the entry; ``kgate.report.compare`` is
the side-by-side view across device classes (``python -m kgate compare``).
The modules, each importing only those listed before it:

- ``format``: run-derived values as text (a leaf);
- ``svg``: the SVG charts; ``links``: links to evidence;
- ``sections``: the stage sections (bench, model, ncu, profile), one registry
  from stage name to view; ``generic``: any other data as tables and plots;
- ``compare``: the devices block (imports only the leaves);
- ``page``: the page model; ``html``, ``summary``, ``junit``: its three renderings;
- ``outputs``: ``render``, which writes the three files.
"""

from kgate.report.outputs import render

__all__ = ["render"]
