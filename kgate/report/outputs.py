"""Render a verdict and its stage records into the report a kernel engineer reads first.

Usage::

    from pathlib import Path
    from kgate import report

    paths = report.render(verdict, records, Path("reports/rwkv6-bwd-fusion/h200"), history=history)

``render`` writes three files into ``out_dir``:

- ``index.html``: one self-contained page (inline CSS and SVG, no JavaScript,
  no network): the verdict and the number that decided it, the gate table,
  the candidate history, then the evidence of every stage (``kgate.report.html``);
- ``summary.md``: the verdict line, the gate table, the SHAs and job ids,
  ready to paste into an issue comment (``kgate.report.summary``);
- ``gates.junit.xml``: one testsuite per stage, one testcase per gate, for CI
  (``kgate.report.junit``).

All three render one page model (``kgate.report.page.build_model``). When the
campaign has records on other device classes too (``results/<campaign>/<gpu>/``
for more than one ``gpu``), index.html and summary.md get a side-by-side
section, one column per device class, built by ``kgate.report.compare``: each
column from that device's own records only. When the report is rendered in the
repository, the campaign's epoch ledger (``kgate.paths.epochs_ledger``) adds
the epochs.

``verdict.json`` is written by ``kgate.verdict``, not here. The inputs follow
the ``kgate.verdict/1`` and ``kgate.stage/1`` formats of docs/architecture.md;
docs/report.md says where every number on the page comes from.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from kgate import paths
from kgate.records import atomic_write_text
from kgate.report.compare import Comparison, DeviceRun, build, current_device, other_devices
from kgate.report.html import render_html
from kgate.report.junit import render_junit
from kgate.report.page import build_model, epoch_rows
from kgate.report.summary import render_summary


def render(
    verdict: dict[str, Any],
    records: list[dict[str, Any]],
    out_dir: Path,
    *,
    history: list[dict[str, Any]] | None = None,
    devices: Sequence[DeviceRun] | None = None,
    ledger: Mapping[str, Any] | None = None,
) -> list[Path]:
    """Write index.html, summary.md and gates.junit.xml into out_dir and return their paths.

    Args:
        verdict:
            A ``kgate.verdict/1`` dict (what ``kgate.verdict`` writes to verdict.json).
        records:
            The ``kgate.stage/1`` records the verdict was computed from, in any order.
        out_dir:
            The report folder; links to evidence assume it is ``reports/<campaign>/<gpu>/``
            under the repository root, as docs/architecture.md lays it out.
        history:
            Candidates of the same campaign and gpu, this one included, each
            ``{candidate, created_utc, numbers: {name: value}}`` plus any other
            fields (``verdict``, statuses, source), shown newest first with the
            change against the one before. Default: ``None``.
        devices:
            The other device classes' runs of this campaign (``kgate.report.compare.DeviceRun``),
            shown side by side with this one. Default ``None``: read them from
            ``results/<campaign>/*/`` when out_dir is the repository's
            ``reports/<campaign>/<gpu>/`` folder (nothing otherwise); ``()`` for none.
        ledger:
            The campaign's epoch ledger (``kgate.epochs/1``). Default ``None``: read
            ``results/<campaign>/epochs.json`` when out_dir is the repository's report folder.

    Raises:
        FormatVersionError: the verdict or a record carries another schema version.
        IncompleteData: a key the report needs is missing.
    """
    out_dir = Path(out_dir)
    root = _repo_root(out_dir, verdict)
    model = build_model(verdict, records, history or [], root=root)
    model = replace(model, devices=_devices(verdict, records, root, devices),
                    epochs=epoch_rows(ledger if ledger is not None else _ledger(verdict, root), records))
    out_dir.mkdir(parents=True, exist_ok=True)
    outputs = (
        ("index.html", render_html(model)),
        ("summary.md", render_summary(model)),
        ("gates.junit.xml", render_junit(model)),
    )
    written = []
    for name, text in outputs:
        path = out_dir / name
        atomic_write_text(path, text)
        written.append(path)
    return written


def _ledger(verdict: Mapping[str, Any], root: Path | None) -> Mapping[str, Any] | None:
    """The campaign's epoch ledger beside the results, when the report is rendered in the repository."""
    if root is None:
        return None
    path = root / paths.epochs_ledger(str(verdict["campaign"]))
    return json.loads(path.read_text()) if path.exists() else None


def _devices(
    verdict: Mapping[str, Any], records: Sequence[Mapping[str, Any]], root: Path | None,
    devices: Sequence[DeviceRun] | None,
) -> Comparison | None:
    """The comparison across device classes (this one first), or None when there is no other device."""
    if devices is None:
        if root is None:
            return None
        devices = other_devices(root, verdict["campaign"], verdict["gpu"], verdict.get("candidate"))
    others = [d for d in devices if d.gpu != verdict["gpu"]]
    if not others:
        return None
    return build(verdict["campaign"], [current_device(verdict, records), *others])


def _repo_root(out_dir: Path, verdict: Mapping[str, Any]) -> Path | None:
    """The repository root when out_dir is its reports/<campaign>/<gpu>/ folder, else None."""
    resolved = out_dir.resolve()
    if resolved.parts[-3:] == paths.report_dir(str(verdict.get("campaign")), str(verdict.get("gpu"))).parts:
        return resolved.parents[2]
    return None
