"""Run-derived values as text: cleaned, formatted with their unit, and escaped for Markdown.

The leaf of the report layer: it imports no other report module, so the SVG
helpers, the stage sections, the page model and ``kgate.report.compare`` all
format the same way.

Method: ``clean`` is applied to every run-derived string (test ids, kernel
names, messages, paths, env values): terminal colour codes (pytest messages)
are dropped, and other characters that XML 1.0 cannot carry, such as NUL, are
shown as ``\\xNN`` text. HTML escaping is not done here (Jinja's autoescape
and ``markupsafe.escape`` in ``kgate.report.svg`` do it); Markdown escaping
is (``md_escape``, ``md_code``). Numbers show four significant digits
(``format_number``); a record key's unit is read from its suffix
(``UNIT_SUFFIXES``, house style).
"""

from __future__ import annotations

import json
import math
import re
import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

#: How each gate and stage status is shown; ``not_run`` only appears in a verdict's ``stages``.
STATUS_LABELS = {
    "pass": "pass",
    "fail": "FAIL",
    "stop": "STOP",
    "skip": "skip",
    "unavailable": "unavailable",
    "inconclusive": "inconclusive",
    "error": "ERROR",
    "not_run": "not run",
}
#: record keys carry their unit as a suffix (house style): these make a numeric mapping a bar chart
UNIT_SUFFIXES = {"_ms": "ms", "_us": "µs", "_ns": "ns", "_s": "s", "_bytes": "bytes", "_mb": "MB", "_gb": "GB"}
#: the keys that name a row of a table of records (first found wins)
LABEL_KEYS = ("row", "name", "label", "kernel", "shape", "key", "id")

_ANSI_CSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_XML_INVALID = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ud800-\udfff\ufffe\uffff]")
_MD_SPECIAL = re.compile(r"([\\`|<>&*\[\]])")
_MD_UNDERSCORE = re.compile(r"(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")
_SAFE_CODE = re.compile(r"^[A-Za-z0-9._/:+=@-]+$")
_PYTEST_E = re.compile(r"^E(?: |$)")
_PYTEST_WHERE = re.compile(r"^\S+:\d+: [A-Za-z_][\w.]*$")


def clean(value: Any) -> str:
    """The text of a run-derived value: terminal colour codes dropped, other characters XML 1.0 cannot carry shown as \\xNN."""
    return _XML_INVALID.sub(lambda m: f"\\x{ord(m.group()):02x}", _ANSI_CSI.sub("", str(value)))


def is_number(value: Any) -> bool:
    """An int or float that is not a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def as_float(value: Any) -> float | None:
    """``value`` as a float when it is a number (not a bool), else None."""
    return float(value) if is_number(value) else None


def format_number(value: float) -> str:
    """An int as it is; a float to four significant digits (inf and nan as Python writes them)."""
    if isinstance(value, int):
        return str(value)
    if not math.isfinite(value):
        return str(value)
    return f"{value:.4g}"


def format_value(value: Any, unit: Any = None) -> str:
    """A gate's value or threshold as one line of text, with its unit when it has one."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif is_number(value):
        text = format_number(value)
    elif isinstance(value, str):
        text = value
    else:
        text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    if unit not in (None, "") and not isinstance(value, str):
        text = f"{text} {unit}"
    return clean(text)


def format_interval(interval: Any, unit: Any = None) -> str:
    """``[lo, hi]`` from a 2-list or a {lo, hi[, level]} dict; other shapes as text; ``""`` for none."""
    if interval is None:
        return ""
    level = None
    if isinstance(interval, Mapping):
        lo, hi = interval.get("lo", interval.get("low")), interval.get("hi", interval.get("high"))
        level = interval.get("level", interval.get("confidence"))
    elif isinstance(interval, Sequence) and not isinstance(interval, str) and len(interval) == 2:
        lo, hi = interval
    else:
        return format_value(interval)
    text = f"[{format_value(lo)}, {format_value(hi)}]"
    if is_number(level):
        text += f" {level:.0%}" if level <= 1 else f" {format_number(level)}%"
    if unit not in (None, ""):
        text += f" {unit}"
    return clean(text)


def compact(value: Any) -> str:
    """One line of JSON, keys sorted, non-ASCII kept."""
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def truncate(text: str, n: int) -> str:
    """At most ``n`` characters, the last one an ellipsis when cut."""
    return text if len(text) <= n else text[: n - 1] + "…"


def md_escape(value: Any) -> str:
    """Text that Markdown (GitHub's included) shows literally, on one line, inside a table cell."""
    text = clean(value).replace("\r\n", " ").replace("\n", " ").replace("\r", " ")
    text = _MD_SPECIAL.sub(r"\\\1", text)
    return _MD_UNDERSCORE.sub(r"\\_", text)


def md_code(value: Any) -> str:
    """A code span for identifier-like values (SHAs, hashes); anything else is escaped text."""
    text = clean(value)
    return f"`{text}`" if _SAFE_CODE.match(text) else md_escape(text)


def error_lines(message: str) -> str:
    """The exception of a pytest failure message: its ``E`` lines and the ``file:line: Type`` line after them.

    "" when the message has no ``E`` lines (then the whole message is the error).
    """
    lines = message.splitlines()
    picked = [i for i, line in enumerate(lines) if _PYTEST_E.match(line)]
    if not picked:
        return ""
    body = textwrap.dedent("\n".join(lines[i][1:] for i in picked)).strip("\n")
    where = next((lines[i].strip() for i in range(picked[-1] + 1, len(lines)) if lines[i].strip()), "")
    return body + ("\n" + where if _PYTEST_WHERE.match(where) else "")


# units


def unit_of(key: str) -> str | None:
    """The unit a record key names by its suffix (``UNIT_SUFFIXES``), or None."""
    for suffix, unit in UNIT_SUFFIXES.items():
        if key.lower().endswith(suffix):
            return unit
    return None


def unit_label(key: str) -> str:
    """``key (unit)`` when the key names a unit, else the key."""
    unit = unit_of(key)
    return f"{key} ({unit})" if unit else key


def _shown(value: Any, fmt: str, scale: float = 1.0) -> str:
    """``value / scale`` in ``fmt`` (a format with its unit), or ``—`` when it is not a number."""
    v = as_float(value)
    return "—" if v is None else fmt.format(v / scale)


def ms(value: Any) -> str:
    """Milliseconds, four significant digits."""
    return _shown(value, "{:.4g} ms")


def us(value: Any) -> str:
    """Microseconds, one decimal, thousands separated."""
    return _shown(value, "{:,.1f} µs")


def mb(value: Any) -> str:
    """Bytes as MB (10^6), one decimal."""
    return _shown(value, "{:,.1f} MB", 1e6)


def times(value: Any) -> str:
    """A ratio as ``1.2345x``."""
    return _shown(value, "{:.4f}x")


# rows of a table of records


def row_label(row: Mapping[str, Any], index: int) -> str:
    """The row's first label (``LABEL_KEYS``), else ``#<index + 1>``."""
    for k in LABEL_KEYS:
        if isinstance(row.get(k), (str, int)) and not isinstance(row.get(k), bool):
            return str(row[k])
    return f"#{index + 1}"


def interval_of(row: Mapping[str, Any]) -> tuple[float | None, float | None]:
    """A row's interval: ``interval`` or ``ci`` (a 2-list or {lo, hi}), else lo/hi, ci_lo/ci_hi or low/high keys."""
    for k in ("interval", "ci"):
        iv = row.get(k)
        if isinstance(iv, Sequence) and not isinstance(iv, str) and len(iv) == 2 and all(is_number(x) for x in iv):
            return float(iv[0]), float(iv[1])
        if isinstance(iv, Mapping) and is_number(iv.get("lo")) and is_number(iv.get("hi")):
            return float(iv["lo"]), float(iv["hi"])
    for lo_key, hi_key in (("lo", "hi"), ("ci_lo", "ci_hi"), ("low", "high")):
        if is_number(row.get(lo_key)) and is_number(row.get(hi_key)):
            return float(row[lo_key]), float(row[hi_key])
    return None, None


def band_of(value: Any) -> tuple[float, float] | None:
    """A ``[lo, hi]`` pair of numbers as a tuple, else None."""
    if isinstance(value, Sequence) and not isinstance(value, str) and len(value) == 2 and all(is_number(x) for x in value):
        return float(value[0]), float(value[1])
    return None
