"""index.html: one self-contained page (inline CSS and SVG, no JavaScript, no network).

Method: ``render_html`` lays a page model (``kgate.report.page.Model``) out
with ``templates/report.html.j2`` (Jinja, autoescape on, undefined names an
error): the verdict and the number that decided it, the gate table, the
candidate history, then one evidence section per stage. ``stage_view`` says
what a stage's section shows: the test runs (``data.tests``, or a ``tests``
list under a key such as ``data.run``), ``data.manifest``, ``data.diff``, the
stage's own section when ``kgate.report.sections.SECTIONS`` has one,
``data.reruns``, one line naming every other data key (the record, linked, is
the evidence: no raw JSON is drawn), and the provenance without the device,
Python, versions and env that the page shows once. Every
run-derived string is escaped by Jinja's autoescape (and by
``markupsafe.escape`` in the SVG helpers); terminal colour codes are dropped
by ``kgate.report.format.clean``.
"""

from __future__ import annotations

import shlex
from collections import Counter
from collections.abc import Mapping
from typing import Any

import jinja2
from markupsafe import Markup, escape

from kgate import paths
from kgate.device import describe as describe_device
from kgate.report.format import STATUS_LABELS, clean, compact, error_lines, format_value, is_number, truncate
from kgate.report.generic import NOT_PATH_KEYS, PATH_KEYS, Context, Node, generic_node
from kgate.report.links import Links
from kgate.report.page import Model, Stage
from kgate.report.sections import SECTIONS, VIEW_KEYS

FAILED_OUTCOMES = ("failed", "error")
OUTCOME_ORDER = ("failed", "error", "xpassed", "rerun", "passed", "skipped", "xfailed", "deselected")


def render_html(model: Model) -> str:
    """The page of ``model``, from ``templates/report.html.j2`` (``kgate.paths.TEMPLATES``)."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(paths.TEMPLATES),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["short"] = model.links.short
    first = next((s.record.get("provenance") for s in model.stages
                  if s.record and isinstance(s.record.get("provenance"), Mapping)), None) or {}
    common = {k: first.get(k) for k in ("device", "python", "versions", "env") if first.get(k) is not None}
    # stage names may wrap after an underscore in the narrow pipeline boxes
    env.filters["wbr"] = lambda name: Markup("_<wbr>").join(escape(clean(name)).split("_"))
    return env.get_template("report.html.j2").render(
        m=model,
        sections=[stage_view(s, model.links, common) for s in model.stages],
        labels=STATUS_LABELS,
        anchors={s.name: s.anchor for s in model.stages},
        hypothesis=clean(model.verdict["hypothesis"]) if model.verdict.get("hypothesis") else None,
        device_rows=_provenance_rows(common),
    )


def stage_view(stage: Stage, links: Links, common: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """What one stage's evidence section shows; the template only lays it out.

    ``common``: provenance values (device, python, versions) that the page shows once; a stage's
    provenance lists them only where its own differ."""
    common = common or {}
    record = stage.record or {}
    data = record.get("data")
    view: dict[str, Any] = {
        "stage": stage,
        "reasons": [clean(r) for r in record.get("reasons") or []],
        "runs": [],
        "manifest": None,
        "diff": None,
        **dict.fromkeys(VIEW_KEYS),
        "generic": None,
        "other": [],
        "reruns": [],
        "provenance": _provenance_rows(record.get("provenance"), common) if record else [],
        "wall": _wall(record),
    }
    if not isinstance(data, Mapping):
        if data is not None:
            view["generic"] = generic_node(data, ctx=Context(stage.name, links))
        return view
    rest = dict(data)
    # test runs: data.tests itself, or a mapping under data (e.g. data.run) that holds a tests list
    if _is_test_list(rest.get("tests")):
        view["runs"].append(_tests_view("tests", rest.pop("tests"), None, links))
    for key, value in list(rest.items()):
        if isinstance(value, Mapping) and _is_test_list(value.get("tests")):
            view["runs"].append(_tests_view(str(key), value["tests"], value, links))
            del rest[key]
    if isinstance(rest.get("manifest"), Mapping):
        view["manifest"] = [(clean(p), format_value(h)) for p, h in sorted(rest.pop("manifest").items())]
    if isinstance(rest.get("diff"), Mapping):
        view["diff"] = _diff_view(rest.pop("diff"), links)
    section = SECTIONS.get(stage.name)
    if section is not None:
        view[section.key] = section.view(rest, links)
    reruns = rest.get("reruns")
    if isinstance(reruns, Mapping) and all(isinstance(v, list) for v in reruns.values()):
        view["reruns"] = [(clean(k), ", ".join(clean(o) for o in v)) for k, v in rest.pop("reruns").items()]
    view["other"] = _other(rest, links)
    return view


def _other(rest: Mapping[str, Any], links: Links) -> list[tuple[str, str, str | None]]:
    """(key, text, href) for the data keys no part of the page shows: a path (a key such as ``log`` or
    ``*_path``) as a link, a short scalar as itself, anything else by its size.

    The record itself (linked in the stage's header) is the evidence; the page names what else it holds
    instead of drawing it as tables."""
    out: list[tuple[str, str, str | None]] = []
    for key, value in rest.items():
        lowered = str(key).lower()
        if isinstance(value, str) and value and "\n" not in value and (
                lowered in PATH_KEYS or (lowered.endswith("_path") and lowered not in NOT_PATH_KEYS)):
            out.append((clean(key), links.short(value), links.href(value)))
        elif value is None or isinstance(value, (bool, int, float)) or (isinstance(value, str) and len(value) <= 40):
            out.append((clean(key), format_value(value), None))
        elif isinstance(value, str):
            out.append((clean(key), f"(text, {len(value):,} characters)", None))
        elif isinstance(value, Mapping):
            out.append((clean(key), f"({len(value)} key{'' if len(value) == 1 else 's'})", None))
        elif isinstance(value, list):
            out.append((clean(key), f"({len(value)} item{'' if len(value) == 1 else 's'})", None))
        else:
            out.append((clean(key), truncate(format_value(value), 40), None))
    return out


def _wall(record: Mapping[str, Any]) -> str:
    wall = (record.get("provenance") or {}).get("wall_s")
    return f"{wall:.1f} s" if is_number(wall) else ""


def _is_test_list(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(t, Mapping) and "nodeid" in t for t in value)


# facts of a test run shown in its heading; the rest of the run goes to a collapsed table
RUN_FACTS = ("summary", "exit_code", "wall_s", "timed_out", "crashed", "command", "log", "junit", "outcomes")


def _tests_view(key: str, tests: list[Mapping[str, Any]], run: Mapping[str, Any] | None, links: Links) -> dict[str, Any]:
    counts = Counter(str(t.get("outcome", "unknown")) for t in tests)
    ordered = sorted(counts, key=lambda o: (OUTCOME_ORDER.index(o) if o in OUTCOME_ORDER else len(OUTCOME_ORDER), o))
    failures = [t for t in tests if t.get("outcome") in FAILED_OUTCOMES]
    others = [t for t in tests if t.get("outcome") not in FAILED_OUTCOMES]

    def row(t: Mapping[str, Any]) -> dict[str, Any]:
        duration = t.get("duration_s")
        message = clean(t.get("message") or "")
        return {
            "nodeid": clean(t.get("nodeid", "")),
            "outcome": clean(t.get("outcome", "unknown")),
            "duration": f"{duration:.2f} s" if is_number(duration) else "—",
            "message": message,
            "error": error_lines(message),
            "lines": message.count("\n") + 1,
        }

    facts: list[tuple[str, Node]] = []
    more = None
    if run is not None:
        ctx = Context(key, links)
        facts = [(k, generic_node(run[k], key=k, ctx=ctx)) for k in RUN_FACTS if k in run]
        # the collected ids repeat the test table
        rest = {k: v for k, v in run.items() if k not in RUN_FACTS and k not in ("tests", "collected")}
        more = generic_node(rest, ctx=ctx) if rest else None
    return {
        "key": clean(key),
        "total": len(tests),
        "total_s": sum(t.get("duration_s") for t in tests if is_number(t.get("duration_s"))),
        "counts": [(clean(o), counts[o]) for o in ordered],
        "failures": [row(t) for t in failures],
        "others": [row(t) for t in others],
        "facts": facts,
        "more": more,
    }


def _diff_view(diff: Mapping[str, Any], links: Links) -> dict[str, Any]:
    files = [f for f in diff.get("files") or [] if isinstance(f, Mapping)]
    known = ("path", "status", "added", "removed")
    extra: list[str] = []
    for f in files:
        extra += [k for k in f if k not in known and k not in extra]
    rows = [
        {
            "path": clean(f.get("path", "")),
            "status": clean(f.get("status", "")),
            "added": format_value(f.get("added")),
            "removed": format_value(f.get("removed")),
            "extra": [format_value(f.get(k)) for k in extra],
        }
        for f in files
    ]
    functions = diff.get("changed_functions") or []
    rest = {k: v for k, v in diff.items() if k not in ("files", "changed_functions", "patch_path")}
    return {
        "files": rows,
        "extra": [clean(k) for k in extra],
        "added": sum(f.get("added") for f in files if is_number(f.get("added"))),
        "removed": sum(f.get("removed") for f in files if is_number(f.get("removed"))),
        "functions": [format_value(fn) for fn in functions] if isinstance(functions, list) else [format_value(functions)],
        "patch": links.short(diff["patch_path"]) if diff.get("patch_path") else None,
        "patch_href": links.href(diff.get("patch_path")),
        "generic": generic_node(rest, ctx=Context("diff", links)) if rest else None,
    }


def _provenance_rows(prov: Any, common: Mapping[str, Any] | None = None) -> list[tuple[str, str]]:
    """(label, text) rows; keys this list does not know are appended as they are. A key whose value equals
    ``common``'s (the page's device block) is left out."""
    if not isinstance(prov, Mapping):
        return []
    prov = {k: v for k, v in prov.items() if not (common and k in common and common[k] == v)}
    rows: list[tuple[str, str]] = []
    shown = set()

    def add(label: str, text: Any, *keys: str) -> None:
        shown.update(keys)
        if text not in (None, "", [], {}):
            rows.append((label, clean(text)))

    add("host", prov.get("host"), "host")
    wall = prov.get("wall_s")
    add("wall time", f"{wall:.1f} s" if is_number(wall) else wall, "wall_s")
    span = " → ".join(str(prov[k]) for k in ("started_utc", "finished_utc") if prov.get(k))
    add("started → finished (UTC)", span, "started_utc", "finished_utc")
    slurm = prov.get("slurm") if isinstance(prov.get("slurm"), Mapping) else {}
    job, node = slurm.get("job_id"), f" on {slurm['node']}" if slurm.get("node") else ""
    local = " (local rule)" if prov.get("local_rule") else ""
    add("slurm job", f"{job}{node}{local}" if job not in (None, "") else f"none: ran locally{local}", "slurm", "local_rule")
    device = prov.get("device")
    if isinstance(device, Mapping):
        parts = [str(device.get("class") or "?"), *describe_device({**device, "name": device.get("name") or ""})]
        if device.get("uuid"):
            parts.append(f"uuid {device['uuid']}")
        known = ("class", "name", "capability", "uuid", "driver", "interpreter")
        extra = {k: v for k, v in device.items() if k not in known}
        if extra:
            parts.append(compact(extra))
        add("device", " · ".join(p for p in parts if p), "device")
    else:
        add("device", device, "device")
    add("python", prov.get("python"), "python")
    versions = prov.get("versions")
    if isinstance(versions, Mapping):
        versions = " · ".join(f"{k} {format_value(v)}" for k, v in versions.items())
    add("versions", versions, "versions")
    for group in ("git", "env"):
        value = prov.get(group)
        if isinstance(value, Mapping):
            shown.add(group)
            for k, v in value.items():
                add(f"{group} {k}", v if isinstance(v, str) or v is None else compact(v))
    command = prov.get("command")
    add("command", shlex.join(str(c) for c in command) if isinstance(command, list) else command, "command")
    for k, v in prov.items():
        if k not in shown:
            add(k, v if isinstance(v, str) or is_number(v) else compact(v), k)
    return rows
