"""gates.junit.xml: one testsuite per stage, one testcase per gate, for CI.

Built with ElementTree, which escapes every attribute and text; run-derived
strings go through ``kgate.report.format.clean`` first, so characters XML
1.0 cannot carry become ``\\xNN`` text. The mapping of statuses is in
``render_junit`` and docs/report.md.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections import Counter

from kgate.report.format import clean, is_number
from kgate.report.page import Model

# JUnit mapping (docs/report.md): fail -> <failure>, error -> <error>, these -> <skipped>
JUNIT_SKIPPED = ("stop", "inconclusive", "unavailable", "skip", "not_run")


def render_junit(model: Model) -> str:
    """One <testsuite> per stage, one <testcase> per gate.

    pass -> plain testcase; fail -> <failure>; error -> <error>; stop,
    inconclusive, unavailable and skip -> <skipped>; a stage that did not run
    is one skipped testcase named ``not_run`` carrying the reason.
    """
    order: list[str] = [s.name for s in model.stages]
    for g in model.gates:
        if g.stage not in order:
            order.append(g.stage)
    stages = {s.name: s for s in model.stages}
    root = ET.Element("testsuites", name=clean(f"kgate {model.campaign}/{model.gpu}: {model.word}"))
    totals = Counter()
    for name in order:
        stage = stages.get(name)
        suite = ET.SubElement(root, "testsuite", name=clean(name))
        props = ET.SubElement(suite, "properties")
        ET.SubElement(props, "property", name="verdict", value=model.word)
        if stage is not None:
            ET.SubElement(props, "property", name="status", value=clean(stage.status))
            if stage.record_path:
                ET.SubElement(props, "property", name="record", value=clean(stage.record_path))
        counts = Counter()
        for g in (g for g in model.gates if g.stage == name):
            case = ET.SubElement(suite, "testcase", classname=clean(f"kgate.{name}"), name=clean(g.name), time="0")
            measured = g.value + (f" {g.interval}" if g.interval else "")
            message = f"{g.status}: {measured} (threshold: {g.threshold})"
            evidence = f"evidence: {clean(g.evidence) if g.evidence else '—'}"
            body = "\n".join([message, *([g.detail] if g.detail else []), evidence])
            counts["tests"] += 1
            if g.status == "fail":
                ET.SubElement(case, "failure", message=message, type="fail").text = body
                counts["failures"] += 1
            elif g.status in JUNIT_SKIPPED:
                ET.SubElement(case, "skipped", message=message, type=clean(g.status)).text = body
                counts["skipped"] += 1
            elif g.status != "pass":
                ET.SubElement(case, "error", message=message, type=clean(g.status)).text = body
                counts["errors"] += 1
            else:
                ET.SubElement(case, "system-out").text = body
        if stage is not None and stage.status == "not_run":
            case = ET.SubElement(suite, "testcase", classname=clean(f"kgate.{name}"), name="not_run", time="0")
            ET.SubElement(case, "skipped", message=clean(f"not run: {stage.why or 'no reason given'}"), type="not_run")
            counts["tests"] += 1
            counts["skipped"] += 1
        wall = ((stage.record or {}).get("provenance") or {}).get("wall_s") if stage else None
        suite.set("time", f"{wall:.3f}" if is_number(wall) else "0")
        for key in ("tests", "failures", "errors", "skipped"):
            suite.set(key, str(counts[key]))
        totals.update(counts)
    for key in ("tests", "failures", "errors", "skipped"):
        root.set(key, str(totals[key]))
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
