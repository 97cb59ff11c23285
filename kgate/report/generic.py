"""Small JSON values of a record as nodes the page lays out: scalars, links, commands and small tables.

The page uses this for the facts of a test run, the rest of a run folded
under it, and the extra keys of a scoped diff. It draws no plots: a plot is
purpose-built by a stage's section (``kgate.report.sections``), and the data
no section shows is named, not drawn (``kgate.report.html``), the record
file being the evidence. ``generic_node`` turns a value into a tree of
``Node``; the template's ``node`` macro lays it out.

Limits: nesting deeper than MAX_DEPTH is shown as indented JSON; a table or
list shows at most MAX_TABLE_ROWS entries and says how many it hid; a value
longer than GENERIC_MAX_CHARS as JSON is named with its size by
``fold_large`` instead of drawn (it stays in record.json).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kgate.report.format import clean, compact, format_value, is_number
from kgate.report.links import Links

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
    children: list[Node] = field(default_factory=list)


# keys whose string value is a path to evidence: shown as a link
PATH_KEYS = ("log", "junit", "outcomes", "evidence", "record", "patch", "manifest")
# keys ending in _path that name no file (a Python module's import path)
NOT_PATH_KEYS = ("import_path",)
COMMAND_KEYS = ("command", "cmd", "argv")
LONG_LIST = 8
LONG_TEXT_LINES = 15


def generic_node(value: Any, *, key: str = "", ctx: Context | None = None, depth: int = 0) -> Node:
    """Turn a JSON value into nodes: scalars, tables of scalars, nested tables; no plots.

    Long lists and texts fold into a collapsed block; a path under a key such
    as ``log`` or ``*_path`` becomes a link; a command list is shown as one
    shell line.
    """
    ctx = ctx or Context("")
    if depth > MAX_DEPTH:
        return Node("pre", text=clean(json.dumps(value, ensure_ascii=False, sort_keys=True, indent=1)))
    if value is None or isinstance(value, (bool, int, float)):
        return Node("scalar", text=format_value(value))
    if isinstance(value, str):
        return _text_node(value, key, ctx)
    if isinstance(value, Mapping):
        if not value:
            return Node("scalar", text="(empty)")
        return Node("map", items=[(clean(k), generic_node(v, key=str(k), ctx=ctx, depth=depth + 1)) for k, v in value.items()])
    if isinstance(value, Sequence):
        return _sequence_node(list(value), key, ctx, depth)
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


def _sequence_node(items: list[Any], key: str, ctx: Context, depth: int) -> Node:
    if not items:
        return Node("scalar", text="(empty)")
    hidden = max(0, len(items) - MAX_TABLE_ROWS)
    if all(is_number(v) for v in items):
        more = f", … ({hidden} more)" if hidden else ""
        return Node("scalar", text=", ".join(format_value(v) for v in items[:MAX_TABLE_ROWS]) + more)
    if all(v is None or isinstance(v, (str, bool, int, float)) for v in items):
        if key.lower() in COMMAND_KEYS and all(isinstance(v, str) for v in items):
            return Node("pre", text=clean(shlex.join(items)))
        if len(items) <= LONG_LIST and all(len(format_value(v)) <= 40 for v in items):
            return Node("scalar", text=", ".join(format_value(v) for v in items))
    if all(isinstance(v, Mapping) for v in items):
        return _table_node(items)
    listed = Node("list", children=[generic_node(v, key=key, ctx=ctx, depth=depth + 1) for v in items[:MAX_TABLE_ROWS]],
                  hidden=hidden)
    return Node("details", text=f"{len(items)} items", children=[listed]) if len(items) > LONG_LIST else listed


def _table_node(items: list[Mapping[str, Any]]) -> Node:
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
    return Node("details", text=f"{len(items)} rows", children=[table]) if len(items) > LONG_LIST * 3 else table
