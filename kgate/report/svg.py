"""SVG charts for the report page: pure functions that return markup, every text escaped here.

Three charts, each a self-contained ``<svg>`` (no script, no external file)
whose first ``<title>`` and ``<desc>`` children are its accessible name and a
text alternative listing every value drawn:

- ``svg_interval_plot``: a forest plot of ratios with their intervals, a
  reference line and a SAME band; each row's class is written beside it;
- ``svg_series_plot``: lines of per-round values (one per arm) with each
  series' median and drift in the legend;
- ``svg_bar_chart``: horizontal bars, one group per label, one bar per series.

Colours come from the Okabe-Ito palette; marker shapes alternate so series
differ without colour too. Labels are run-derived: each goes through
``kgate.report.format.clean`` and ``markupsafe.escape``. Imports only
``kgate.report.format`` of the report layer.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from markupsafe import Markup, escape

from kgate.report.format import clean, format_number, is_number, truncate

# Okabe-Ito: distinguishable with the common colour-vision deficiencies
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#8C7A00", "#000000")


# advance widths in em of DejaVu Sans (the widest common sans; narrower fonts only leave more room):
# the label columns are sized from these, so no label is cut by the viewBox
_NARROW = set("iljI.,:;'|!")
_SEMI = set("frt ()[]-/")
_WIDE = set("mwMW%@")


def text_width(text: Any, size: float = 12.0, *, bold: bool = False) -> float:
    """The width in px that ``text`` takes at ``size`` px, estimated from per-character advances (an upper bound
    for DejaVu Sans, Helvetica, Arial and Roboto, so a column sized from it holds the text)."""
    em = 0.0
    for ch in clean(text):
        if ch in _NARROW:
            em += 0.34
        elif ch in _SEMI:
            em += 0.44
        elif ch in _WIDE:
            em += 1.0
        elif ch.isdigit() or ch.islower() or ch == "_":
            em += 0.64
        elif ch.isupper():
            em += 0.78
        else:
            em += 0.86
    return em * size * (1.08 if bold else 1.0)


def _f(x: float) -> str:
    return f"{x:.1f}".rstrip("0").rstrip(".")


def _text(x: float, y: float, text: Any, cls: str = "pl", *, anchor: str = "", fill: str = "", limit: int = 0) -> str:
    """One escaped <text> element; ``limit`` truncates long labels."""
    body = clean(text)
    body = truncate(body, limit) if limit else body
    extra = (f' text-anchor="{anchor}"' if anchor else "") + (f' fill="{fill}"' if fill else "")
    return f'<text x="{_f(x)}" y="{_f(y)}" class="{cls}"{extra}>{escape(body)}</text>'


def _line(x1: float, y1: float, x2: float, y2: float, attrs: str = 'class="grid"') -> str:
    return f'<line x1="{_f(x1)}" y1="{_f(y1)}" x2="{_f(x2)}" y2="{_f(y2)}" {attrs}/>'


def _svg_open(width: int, height: int, title: str, desc: str) -> str:
    # the first <title> and <desc> children are the plot's accessible name and text alternative
    return (
        f'<svg class="plot" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="{width}" '
        f'height="{height}" role="img"><title>{escape(clean(title))}</title><desc>{escape(clean(desc))}</desc>'
        + _text(width / 2, 18, _fit(title, width - 16, 14, bold=True), "pt", anchor="middle")
    )


def _fit(text: Any, px: float, size: float = 12.0, *, bold: bool = False) -> str:
    """``text`` cut with an ellipsis so that it takes at most ``px`` at ``size``."""
    body = clean(text)
    while body and text_width(body, size, bold=bold) > px:
        body = truncate(body, max(len(body) - 2, 1))
        if len(body) <= 2:
            break
    return body


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """Round tick values covering [lo, hi] (1, 2, 2.5, 5 x 10^k steps), about ``count`` of them."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return [lo]
    raw = (hi - lo) / max(count, 1)
    mag = 10 ** math.floor(math.log10(raw))
    # the round step whose tick count is closest to the one asked for
    step = min((m * mag for m in (1, 2, 2.5, 5, 10)), key=lambda st: abs((hi - lo) / st - count))
    ticks = []
    t = math.ceil(lo / step - 1e-9) * step
    while t <= hi + step * 1e-9:
        ticks.append(round(t, 12))
        t += step
    return ticks


def _padded(values: Iterable[float], pad: float = 0.06) -> tuple[float, float]:
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return 0.0, 1.0
    lo, hi = min(finite), max(finite)
    if hi == lo:
        spread = abs(lo) * 0.05 or 0.5
        return lo - spread, hi + spread
    span = hi - lo
    return lo - span * pad, hi + span * pad


def _label_width(labels: Iterable[str], size: float = 12.0) -> int:
    """The left column that holds every label (each cut at 40 characters) at ``size`` px, 60 to 360 px."""
    widest = max((text_width(truncate(clean(label), 40), size) for label in labels), default=30.0)
    return int(min(360, max(60, widest + 16)))


def svg_interval_plot(
    rows: Sequence[tuple[str, float, float | None, float | None]],
    ref: float = 1.0,
    band: tuple[float, float] | None = None,
    *,
    title: str = "Ratio per row with its interval",
    x_label: str = "ratio (baseline time / candidate time)",
    higher_is_better: bool = True,
    geomean: tuple[str, float, float | None, float | None] | None = None,
    bar: float | None = None,
    classes: Sequence[str | None] | None = None,
) -> Markup:
    """A forest plot: one row per (label, point, lo, hi), a reference line at ``ref`` and a SAME band.

    A row whose interval lies inside the band is SAME, above it FAST (below it
    SLOW) when ``higher_is_better``, and AMBIGUOUS when the interval crosses a
    band edge; ``classes`` (one per row, e.g. the record's own classification)
    replaces that reading where given. The class is written beside each row,
    not only coloured. ``geomean`` adds a summary row below a rule (a diamond),
    ``bar`` a solid vertical line labelled with its value. The label and value
    columns are sized from ``text_width``, so no word is cut by the viewBox.
    """
    rows = [(str(label), float(p), lo, hi) for label, p, lo, hi in rows if is_number(p) and math.isfinite(p)]
    given = list(classes or [])
    summary = None
    if geomean is not None and is_number(geomean[1]) and math.isfinite(geomean[1]):
        summary = (str(geomean[0]), float(geomean[1]), geomean[2], geomean[3])

    def classify(p: float, lo: float | None, hi: float | None) -> str:
        if band is None:
            return ""
        lo, hi = (p if lo is None else lo), (p if hi is None else hi)
        if band[0] <= lo and hi <= band[1]:
            return "SAME"
        if lo > band[1]:
            return "FAST" if higher_is_better else "SLOW"
        if hi < band[0]:
            return "SLOW" if higher_is_better else "FAST"
        return "AMBIGUOUS"

    drawn = [*rows, *([summary] if summary else [])]
    classes_of = [str(given[i]).upper() if i < len(given) and given[i] else classify(*r[1:]) for i, r in enumerate(rows)]
    if summary:
        classes_of.append(classify(*summary[1:]))
    values = [f"{format_number(p)}" + (f" [{format_number(lo)}, {format_number(hi)}]" if is_number(lo) and is_number(hi)
                                        else "") for _, p, lo, hi in drawn]
    row_h, top, plot_w = 24, 58, 440
    gap = 10 if summary else 0
    plot_bottom = top + max(len(drawn), 1) * row_h + gap
    height = plot_bottom + 48
    x0 = _label_width(r[0] for r in drawn)
    value_w = max((text_width(v, 12) for v in values), default=0.0)
    class_w = max((text_width(c, 12, bold=True) for c in classes_of), default=0.0)
    x1 = x0 + plot_w
    width = int(x1 + 14 + value_w + 10 + class_w + 12)
    lo_x, hi_x = _padded([ref, *(v for r in drawn for v in r[1:] if is_number(v)), *(band or ()),
                          *([bar] if is_number(bar) else [])])

    def sx(v: float) -> float:
        return x0 + (v - lo_x) / (hi_x - lo_x) * (x1 - x0)

    colours = {"SAME": "#57606a", "FAST": "#1a7f37", "SLOW": "#c62828", "AMBIGUOUS": "#b35c00", "": "#0072B2"}
    desc = f"{x_label}; reference line at {format_number(ref)}"
    if band:
        desc += f"; SAME band [{format_number(band[0])}, {format_number(band[1])}]"
    if is_number(bar):
        desc += f"; bar {format_number(bar)}"
    listed = "; ".join(f"{r[0]}: {v} {c}".rstrip() for r, v, c in zip(drawn, values, classes_of))
    desc += ". " + (listed or "no rows")
    out = [_svg_open(width, height, title, desc)]
    if band:
        bx0, bx1 = sx(band[0]), sx(band[1])
        out.append(f'<rect x="{_f(bx0)}" y="{top}" width="{_f(bx1 - bx0)}" height="{plot_bottom - top}" fill="#e8ecef"/>')
        out.append(_text((bx0 + bx1) / 2, top - 5, "SAME band", "ps", anchor="middle"))
    for tick in nice_ticks(lo_x, hi_x, 6):
        out.append(_line(sx(tick), top, sx(tick), plot_bottom))
        out.append(_text(sx(tick), plot_bottom + 16, format_number(tick), anchor="middle"))
    out.append(_line(sx(ref), top - 2, sx(ref), plot_bottom, 'stroke="#24292f" stroke-dasharray="4 3"'))
    if is_number(bar) and math.isfinite(bar):
        out.append(_line(sx(bar), top - 18, sx(bar), plot_bottom, 'stroke="#1a7f37" stroke-width="2"'))
        label = f"bar {format_number(bar)}"
        anchor = "end" if sx(bar) + text_width(label) / 2 > x1 else "middle"
        out.append(_text(sx(bar), top - 22, label, "ps", anchor=anchor, fill="#1a7f37"))
    if summary:
        ys = top + len(rows) * row_h + gap / 2
        out.append(_line(x0 - 8 - min(x0 - 16, text_width(summary[0])), ys, width - 4, ys, 'stroke="#8c959f"'))
    for i, ((label, p, lo, hi), value, cls) in enumerate(zip(drawn, values, classes_of)):
        last = summary is not None and i == len(drawn) - 1
        y = top + i * row_h + row_h / 2 + (gap if last else 0)
        colour = colours.get(cls, colours[""])
        stroke = f'stroke="{colour}" stroke-width="{3 if last else 2}"'
        out.append("<g>")
        out.append(_text(x0 - 8, y + 4, _fit(truncate(clean(label), 40), x0 - 12), "pl pb" if last else "pl",
                         anchor="end"))
        if is_number(lo) and is_number(hi):
            out.append(_line(sx(lo), y, sx(hi), y, stroke))
            out += [_line(e, y - 5, e, y + 5, stroke) for e in (sx(lo), sx(hi))]
        if last:
            cx = sx(p)
            diamond = f"{_f(cx - 7)},{_f(y)} {_f(cx)},{_f(y - 7)} {_f(cx + 7)},{_f(y)} {_f(cx)},{_f(y + 7)}"
            out.append(f'<polygon points="{diamond}" fill="{colour}"/>')
        else:
            out.append(f'<circle cx="{_f(sx(p))}" cy="{_f(y)}" r="4.5" fill="{colour}"/>')
        out.append(_text(x1 + 14, y + 4, value, fill=colour))
        if cls:
            out.append(_text(x1 + 14 + value_w + 10, y + 4, cls, "pl pb", fill=colour))
        out.append("</g>")
    if not drawn:
        out.append(_text((x0 + x1) / 2, top + 16, "no rows", anchor="middle"))
    out.append(_text((x0 + x1) / 2, height - 8, _fit(x_label, width - 16, 12.5), "pa", anchor="middle"))
    out.append("</svg>")
    return Markup("".join(out))


def drift(values: Sequence[float]) -> float | None:
    """Least-squares slope per round relative to the median, or None for < 3 points."""
    pts = [(i, v) for i, v in enumerate(values) if math.isfinite(v)]
    if len(pts) < 3:
        return None
    n = len(pts)
    mx = sum(i for i, _ in pts) / n
    my = sum(v for _, v in pts) / n
    sxx = sum((i - mx) ** 2 for i, _ in pts)
    slope = sum((i - mx) * (v - my) for i, v in pts) / sxx
    med = statistics.median(v for _, v in pts)
    return slope / med if med else None


def svg_series_plot(
    series: Mapping[str, Sequence[float]],
    y_label: str,
    *,
    title: str = "Per-round times per arm",
    x_label: str = "round",
) -> Markup:
    """Lines of per-round values, one per arm, so drift over rounds is visible.

    The legend gives each series' median and its drift (least-squares slope
    per round, relative to the median).
    """
    arms = {str(k): [float(v) if is_number(v) else math.nan for v in vals] for k, vals in series.items()}
    n = max((len(v) for v in arms.values()), default=0)
    lo_y, hi_y = _padded(v for vals in arms.values() for v in vals)
    stats = []
    for vals in arms.values():
        finite = [v for v in vals if math.isfinite(v)]
        stats.append((statistics.median(finite) if finite else math.nan, drift(vals)))
    legend = [w for (name, _), (med, d) in zip(arms.items(), stats)
              for w in (text_width(truncate(clean(name), 24)), text_width(f"median {format_number(med)}", 11),
                        text_width(f"drift {d:+.2%} per {truncate(x_label, 12)}", 11) if d is not None else 0.0)]
    ticks = nice_ticks(lo_y, hi_y, 5)
    left = int(max((text_width(format_number(tk)) for tk in ticks), default=30.0) + 34)
    right = int(max(legend, default=60.0) + 44)
    width, height, top, bottom = max(560, left + 460 + right), max(300, 60 + len(arms) * 46), 34, 46
    x0, x1, y0, y1 = left, width - right, height - bottom, top

    def sx(i: int) -> float:
        return x0 + (i / (n - 1) if n > 1 else 0.5) * (x1 - x0)

    def sy(v: float) -> float:
        return y0 - (v - lo_y) / (hi_y - lo_y) * (y0 - y1)

    desc = f"{y_label} by {x_label}. " + "; ".join(
        f"{name}: {', '.join(format_number(v) for v in vals[:50])}{' …' if len(vals) > 50 else ''}"
        f" (median {format_number(med)}{f', drift {d:+.2%} per {x_label}' if d is not None else ''})"
        for (name, vals), (med, d) in zip(arms.items(), stats)
    )
    out = [_svg_open(width, height, title, desc)]
    for tk in ticks:
        out.append(_line(x0, sy(tk), x1, sy(tk)))
        out.append(_text(x0 - 6, sy(tk) + 4, format_number(tk), anchor="end"))
    for i in range(0, n, max(1, math.ceil(n / 12))):
        out.append(_text(sx(i), y0 + 16, i + 1, anchor="middle"))
    out.append(_line(x0, y0, x1, y0, 'stroke="#57606a"'))
    for k, ((name, vals), (med, slope)) in enumerate(zip(arms.items(), stats)):
        colour = PALETTE[k % len(PALETTE)]
        pts = [(sx(i), sy(v)) for i, v in enumerate(vals) if math.isfinite(v)]
        if len(pts) > 1:
            path = " ".join(f"{_f(x)},{_f(y)}" for x, y in pts)
            out.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="1.8"/>')
        # alternate marker shapes so arms differ without colour too
        for x, y in pts:
            if k % 2 == 0:
                out.append(f'<circle cx="{_f(x)}" cy="{_f(y)}" r="3" fill="{colour}"/>')
            else:
                out.append(f'<rect x="{_f(x - 3)}" y="{_f(y - 3)}" width="6" height="6" fill="{colour}"/>')
        ly = top + 8 + k * 46
        out.append(f'<rect x="{x1 + 14}" y="{ly - 8}" width="10" height="10" fill="{colour}"/>')
        out.append(_text(x1 + 30, ly + 1, name, limit=24))
        out.append(_text(x1 + 30, ly + 15, f"median {format_number(med)}", "ps"))
        if slope is not None:
            out.append(_text(x1 + 30, ly + 29, f"drift {slope:+.2%} per {truncate(x_label, 12)}", "ps"))
    if n == 0:
        out.append(_text((x0 + x1) / 2, (y0 + y1) / 2, "no values", anchor="middle"))
    out.append(_text((x0 + x1) / 2, height - 8, x_label, "pa", anchor="middle"))
    out.append(
        f'<text transform="translate(14 {_f((y0 + y1) / 2)}) rotate(-90)" text-anchor="middle" class="pa">'
        f"{escape(truncate(clean(y_label), 40))}</text>"
    )
    out.append("</svg>")
    return Markup("".join(out))


def svg_bar_chart(
    labels: Sequence[str],
    series: Mapping[str, Sequence[float]],
    unit: str,
    *,
    title: str = "Per-kernel time",
) -> Markup:
    """Horizontal bars: one group per label (e.g. a kernel), one bar per series (e.g. an arm), value in ``unit``."""
    labels = [str(label) for label in labels]
    values = {str(k): [float(v) if is_number(v) else math.nan for v in vals] for k, vals in series.items()}
    names = list(values)
    bar_h, gap = 14, 10
    group_h = bar_h * max(len(names), 1) + gap
    widest = max((text_width(format_number(v), 11) for vals in values.values() for v in vals), default=30.0)
    width, right, top = 760, int(max(widest, 24.0) + 16), 34 + (20 if len(names) > 1 else 0)
    plot_bottom = top + max(len(labels), 1) * group_h
    height = plot_bottom + 44
    x0, x1 = _label_width(labels), width - right
    finite = [v for vals in values.values() for v in vals if math.isfinite(v)]
    lo, hi = min([0.0, *finite]), max([0.0, *finite]) or 1.0
    ticks = nice_ticks(lo, hi, 5)
    hi = max(hi, ticks[-1])

    def sx(v: float) -> float:
        return x0 + (v - lo) / (hi - lo) * (x1 - x0)

    def value(name: str, i: int) -> float:
        return values[name][i] if i < len(values[name]) else math.nan

    desc = f"{unit} per label. " + "; ".join(
        f"{label}: " + ", ".join(f"{name} {format_number(value(name, i))}" for name in names) for i, label in enumerate(labels)
    )
    out = [_svg_open(width, height, title, desc)]
    if len(names) > 1:
        for k, name in enumerate(names):
            out.append(f'<rect x="{x0 + k * 150}" y="{top - 22}" width="10" height="10" fill="{PALETTE[k % len(PALETTE)]}"/>')
            out.append(_text(x0 + k * 150 + 14, top - 13, _fit(name, 132), limit=0))
    for t in ticks:
        out.append(_line(sx(t), top, sx(t), plot_bottom))
        out.append(_text(sx(t), plot_bottom + 16, format_number(t), anchor="middle"))
    for i, label in enumerate(labels):
        gy = top + i * group_h
        out.append(f"<g><title>{escape(clean(label))}</title>")
        out.append(_text(x0 - 8, gy + group_h / 2, _fit(truncate(clean(label), 40), x0 - 12), anchor="end"))
        for k, name in enumerate(names):
            v, y = value(name, i), gy + k * bar_h
            if math.isfinite(v):
                a, b = sorted((sx(0), sx(v)))
                out.append(
                    f'<rect x="{_f(a)}" y="{_f(y)}" width="{_f(max(b - a, 0.5))}" height="{bar_h - 2}" '
                    f'fill="{PALETTE[k % len(PALETTE)]}"/>'
                )
                out.append(_text(b + 4, y + bar_h - 4, format_number(v), "ps"))
            else:
                out.append(_text(sx(0) + 4, y + bar_h - 4, "n/a", "ps"))
        out.append("</g>")
    out.append(_line(sx(0), top, sx(0), plot_bottom, 'stroke="#57606a"'))
    out.append(_text((x0 + x1) / 2, height - 8, unit, "pa", anchor="middle"))
    out.append("</svg>")
    return Markup("".join(out))
