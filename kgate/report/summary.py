"""summary.md: the verdict line, the gate table, the SHAs and job ids, ready to paste into an issue comment.

GitHub-flavoured Markdown. Every run-derived string goes through
``kgate.report.format.md_escape`` (or ``md_code`` for SHAs and hashes), so a
test id or message cannot break the table or turn into markup. Below the gate
table come the tables of the stage sections that have one
(``kgate.report.sections.SECTIONS``: the plausibility bound and the pair
table), and, when the campaign has records on other device classes, one row
per device class with its own verdict.
"""

from __future__ import annotations

from collections.abc import Mapping

from kgate.report.format import STATUS_LABELS, md_code, md_escape, truncate
from kgate.report.page import Model
from kgate.report.sections import SECTIONS


def render_summary(model: Model) -> str:
    """The verdict line, the gate table, SHAs and job ids in GitHub-flavoured Markdown."""
    cand = f", candidate {md_code(model.candidate)}" if model.candidate else ""
    lines = [
        f"### kgate verdict: **{model.word}** · {md_escape(model.campaign)} on {md_escape(model.gpu)}{cand}",
        "",
    ]
    if model.sentence:
        lines += [md_escape(model.sentence), ""]
    if model.word == "SMOKE":
        lines += ["> **CPU smoke run:** timings are not meaningful, and a CPU run never yields GO.", ""]
    elif model.cpu:
        lines += ["> **CPU run:** timings are not meaningful (correctness results stand); a CPU run never yields GO.", ""]
    if model.forced_past:
        would = f" (would be {md_escape(model.would_be)})" if model.would_be else ""
        lines += [f"> **Forced run** past {md_escape(', '.join(model.forced_past))}: never GO{would}.", ""]
    lines += ["| stage | gate | threshold | measured | status |", "|---|---|---|---|---|"]
    for g in model.gates:
        measured = g.value + (f" {g.interval}" if g.interval else "")
        if g.detail and g.status != "pass":
            measured += f" ({truncate(g.detail, 300)})"
        name = f"**{md_escape(g.name)}**" if g.decisive else md_escape(g.name)
        lines.append(
            f"| {md_escape(g.stage)} | {name} | {md_escape(g.threshold)} | {md_escape(measured)} | "
            f"{md_escape(STATUS_LABELS.get(g.status, g.status))} |"
        )
    for s in model.stages:
        if s.status == "not_run":
            lines.append(f"| {md_escape(s.name)} | — | — | not run: {md_escape(s.why or 'no reason given')} | not run |")
    lines += _section_tables(model)
    lines += ["", "| commit | SHA | from |", "|---|---|---|"]
    for label, sha, source in model.shas:
        lines.append(f"| {label} | {md_code(sha) if sha else '—'} | {md_escape(source)} |")
    if model.time_line:
        lines += ["", f"Time to verdict: {md_escape(model.time_line)}"]
    if model.jobs:
        lines += ["", "Jobs: " + " · ".join(f"{md_escape(stage)}: {md_escape(job)}" for stage, job in model.jobs)]
    if model.devices is not None:
        lines += ["", "Across devices (each row from that device class's own records; index.html has every gate "
                  "side by side):", "", "| device class | verdict | candidate | device | decided by |",
                  "|---|---|---|---|---|"]
        for d in model.devices.devices:
            decided = (d.verdict or {}).get("decided_by") or {}
            by = " / ".join(str(decided[k]) for k in ("stage", "gate") if decided.get(k)) or "—"
            name = md_escape(d.gpu) + (" (this report)" if d.current else "")
            lines.append(f"| {name} | {md_escape(d.word or '— (no verdict.json)')} | "
                         f"{md_code(d.candidate) if d.candidate else '—'} | {md_escape(d.describe())} | {md_escape(by)} |")
    lines += ["", f"Report: {md_code(model.links.base + '/index.html')}", ""]
    return "\n".join(lines)


def _section_tables(model: Model) -> list[str]:
    """The tables the stage sections put into summary.md (``Section.summary_cells``), when those stages have records."""
    lines: list[str] = []
    for s in model.stages:
        rows = ((s.record or {}).get("data") or {}).get("rows") if isinstance((s.record or {}).get("data"), Mapping) else None
        if not isinstance(rows, list):
            continue
        section = SECTIONS.get(s.name)
        if section is None or section.summary_cells is None:
            continue
        cells, title = section.summary_cells(rows), section.summary_title
        if cells:
            lines += ["", title, "", "| " + " | ".join(md_escape(c) for c in cells[0]) + " |",
                      "|" + "---|" * len(cells[0])]
            lines += ["| " + " | ".join(md_escape(c) for c in row) + " |" for row in cells[1:]]
    return lines
