"""Any JSON value of a record as nodes the page lays out: scalars, tables, nested tables and plots.

A stage's data that no section of ``kgate.report.sections`` shows (and any
key a section leaves in the data) is drawn here, so a new stage or a new
key shows up on the page without a code change. ``generic_node`` turns a value
into a tree of ``Node``; the template's ``node`` macro lays it out. Plots come
from ``kgate.report.svg``; see ``generic_node`` for which shapes get one.

Limits: nesting deeper than MAX_DEPTH is shown as indented JSON; a table or
list shows at most MAX_TABLE_ROWS entries and says how many it hid; a value
longer than GENERIC_MAX_CHARS as JSON is named with its size by
``fold_large`` instead of drawn (it stays in record.json).
"""

from __future__ import annotations

import json
import math
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from markupsafe import Markup

from kgate.report.format import (
    band_of,
    clean,
    compact,
    format_value,
    interval_of,
    is_number,
    row_label,
    unit_label,
    unit_of,
)
from kgate.report.links import Links
from kgate.report.svg import svg_bar_chart, svg_interval_plot, svg_series_plot

MAX_TABLE_ROWS = 200
# a record data key whose JSON is longer than this is named with its size, not drawn: it stays in record.json
# (e.g. the resources of a few hundred autotuning variants would make a page of several MB)
GENERIC_MAX_CHARS = 16_000
MAX_DEPTH = 6


def fold_large(data: Mapping[str, Any], record_path: str | None) -> dict[str, Any]:
    """``data`` with every value longer than GENERIC_MAX_CHARS as JSON replaced by a line naming its size;
    a mapping that long is folded key by key, so its small parts are still drawn."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        size = len(json.dumps(value, default=str))
        if size <= GENERIC_MAX_CHARS:
            out[key] = value
        elif isinstance(value, Mapping):
            out[key] = fold_large(value, record_path)
        else:
            count = f"{len(value)} entries, " if isinstance(value, list) else ""
            out[key] = f"{count}{size / 1000:,.0f} kB of JSON: not drawn here, kept in {record_path or 'the record'}"
    return out


@dataclass(frozen=True)
class Context:
    """Where a generic value sits: the plot title prefix and how to link paths."""

    title: str
    links: Links | None = None


@dataclass(frozen=True)
class Node:
    """A piece of generic evidence: kind is scalar, pre, link, map, table, list, details or plot."""

    kind: str
    text: str = ""
    href: str | None = None
    items: list[tuple[str, Node]] = field(default_factory=list)
    columns: list[str] = field(default_factory=list)
    rows: list[list[str]] = field(default_factory=list)
    hidden: int = 0
    svg: Markup | None = None
    children: list[Node] = field(default_factory=list)


# keys whose string value is a path to evidence: shown as a link
PATH_KEYS = ("log", "junit", "outcomes", "evidence", "record", "patch", "manifest")
# keys ending in _path that name no file (a Python module's import path)
NOT_PATH_KEYS = ("import_path",)
COMMAND_KEYS = ("command", "cmd", "argv")
LONG_LIST = 8
LONG_TEXT_LINES = 15


def generic_node(
    value: Any,
    *,
    key: str = "",
    ctx: Context | None = None,
    depth: int = 0,
    plots: bool = True,
    band: tuple[float, float] | None = None,
) -> Node:
    """Turn any JSON value into nodes: scalars, tables of scalars, nested tables, and plots of numeric series.

    Plots are added beside the table of the same numbers when the value is
    a list of >= 3 numbers, a mapping of names to lists of numbers (one
    series each), a list of rows with ``ratio`` and an interval (interval
    plot; a sibling ``same_band: [lo, hi]`` draws the band), or numbers keyed
    by a unit suffix such as ``_ms`` (bar chart). ``plots=False`` lists
    numbers that a parent's plot already draws. Long lists and texts fold
    into a collapsed block; a path under a key such as ``log`` or
    ``*_path`` becomes a link; a command list is shown as one shell line.
    """
    ctx = ctx or Context("")
    label = f"{ctx.title}: {key}" if ctx.title and key else (ctx.title or key or "value")
    if depth > MAX_DEPTH:
        return Node("pre", text=clean(json.dumps(value, ensure_ascii=False, sort_keys=True, indent=1)))
    if value is None or isinstance(value, (bool, int, float)):
        return Node("scalar", text=format_value(value))
    if isinstance(value, str):
        return _text_node(value, key, ctx)
    if isinstance(value, Mapping):
        if not value:
            return Node("scalar", text="(empty)")
        plot = _mapping_plot(value, key, label) if plots else None
        sibling_band = band_of(value.get("same_band", value.get("band")))
        # numbers already drawn in the mapping's plot are listed, not drawn again
        items = [
            (clean(k), generic_node(v, key=str(k), ctx=ctx, depth=depth + 1, plots=plot is None, band=sibling_band))
            for k, v in value.items()
        ]
        node = Node("map", items=items)
        return Node("list", children=[plot, node]) if plot else node
    if isinstance(value, Sequence):
        return _sequence_node(list(value), key, label, ctx, depth, plots, band)
    return Node("scalar", text=clean(repr(value)))


def _text_node(value: str, key: str, ctx: Context) -> Node:
    text = clean(value)
    lowered = key.lower()
    is_path = lowered in PATH_KEYS or (lowered.endswith("_path") and lowered not in NOT_PATH_KEYS)
    if is_path and ctx.links is not None and text and "\n" not in text and len(text) < 1000:
        return Node("link", text=ctx.links.short(text), href=ctx.links.href(text))
    lines = text.count("\n") + 1
    if lines > LONG_TEXT_LINES:
        return Node("details", text=f"{lines} lines", children=[Node("pre", text=text)])
    return Node("pre" if "\n" in text or len(text) > 160 else "scalar", text=text)


def _sequence_node(
    items: list[Any], key: str, label: str, ctx: Context, depth: int, plots: bool, band: tuple[float, float] | None
) -> Node:
    if not items:
        return Node("scalar", text="(empty)")
    hidden = max(0, len(items) - MAX_TABLE_ROWS)
    if all(is_number(v) for v in items):
        text = ", ".join(format_value(v) for v in items[:MAX_TABLE_ROWS]) + (f", … ({hidden} more)" if hidden else "")
        scalar = Node("scalar", text=text)
        if plots and len(items) >= 3:
            plot = svg_series_plot({key or "value": items}, unit_label(key) or key or "value", title=label)
            return Node("list", children=[Node("plot", svg=plot), scalar])
        return scalar
    if all(v is None or isinstance(v, (str, bool, int, float)) for v in items):
        if key.lower() in COMMAND_KEYS and all(isinstance(v, str) for v in items):
            return Node("pre", text=clean(shlex.join(items)))
        if len(items) <= LONG_LIST and all(len(format_value(v)) <= 40 for v in items):
            return Node("scalar", text=", ".join(format_value(v) for v in items))
        listed = Node("list", children=[generic_node(v, key=key, ctx=ctx, depth=depth + 1) for v in items[:MAX_TABLE_ROWS]],
                      hidden=hidden)
        return Node("details", text=f"{len(items)} items", children=[listed]) if len(items) > LONG_LIST else listed
    if all(isinstance(v, Mapping) for v in items):
        return _table_node(items, label, band if plots else None, plots)
    listed = Node("list", children=[generic_node(v, key=key, ctx=ctx, depth=depth + 1) for v in items[:MAX_TABLE_ROWS]],
                  hidden=hidden)
    return Node("details", text=f"{len(items)} items", children=[listed]) if len(items) > LONG_LIST else listed


def _table_node(items: list[Mapping[str, Any]], label: str, band: tuple[float, float] | None, plots: bool) -> Node:
    columns: list[str] = []
    for row in items:
        columns += [str(k) for k in row if str(k) not in columns]
    rows = []
    for row in items[:MAX_TABLE_ROWS]:
        cells = []
        for col in columns:
            v = row.get(col)
            if col not in row:
                cells.append("")
            elif isinstance(v, (Mapping, list)):
                cells.append(clean(compact(v)))
            else:
                cells.append(format_value(v))
        rows.append(cells)
    table = Node("table", columns=[clean(c) for c in columns], rows=rows, hidden=max(0, len(items) - MAX_TABLE_ROWS))
    drawn = [_interval_rows_plot(items, band, label), _rows_bar_plot(items, label)] if plots else []
    drawn = [p for p in drawn if p is not None]
    if len(items) > LONG_LIST * 3 and not drawn:
        return Node("details", text=f"{len(items)} rows", children=[table])
    return Node("list", children=[*drawn, table]) if drawn else table


def _interval_rows_plot(items: Sequence[Mapping[str, Any]], band: tuple[float, float] | None, label: str) -> Node | None:
    rows = []
    for i, row in enumerate(items):
        if not is_number(row.get("ratio")):
            return None
        lo, hi = interval_of(row)
        rows.append((row_label(row, i), float(row["ratio"]), lo, hi))
    if not rows:
        return None
    return Node("plot", svg=svg_interval_plot(rows, band=band, title=label))


def _rows_bar_plot(items: Sequence[Mapping[str, Any]], label: str) -> Node | None:
    """Rows with a label and numeric columns of one unit (e.g. baseline_ms, candidate_ms) -> bar chart."""
    if len(items) < 2 or any(row_label(r, i).startswith("#") for i, r in enumerate(items)):
        return None
    numeric = [k for k in items[0] if is_number(items[0][k]) and unit_of(str(k))]
    units = {unit_of(str(k)) for k in numeric}
    if not numeric or len(units) != 1:
        return None
    series = {str(k): [float(r[k]) if is_number(r.get(k)) else math.nan for r in items] for k in numeric}
    # all zeros (e.g. no spills anywhere) says nothing a table does not
    if not any(v for vals in series.values() for v in vals if math.isfinite(v)):
        return None
    labels = [row_label(r, i) for i, r in enumerate(items)]
    return Node("plot", svg=svg_bar_chart(labels, series, units.pop() or "", title=label))


def _mapping_plot(value: Mapping[str, Any], key: str, label: str) -> Node | None:
    values = list(value.values())
    if not values:
        return None
    # {arm: [per-round numbers]} -> one series per arm
    if all(isinstance(v, list) and len(v) >= 2 and all(is_number(x) for x in v) for v in values):
        series = {str(k): v for k, v in value.items()}
        return Node("plot", svg=svg_series_plot(series, unit_label(key) or "value", title=label))
    # {kernel: time} under a key with a unit suffix -> bar chart
    unit = unit_of(key)
    if unit and len(values) >= 2 and all(is_number(v) for v in values) and any(values):
        return Node("plot", svg=svg_bar_chart([str(k) for k in value], {key: [float(v) for v in values]}, unit, title=label))
    return None


