#!/usr/bin/env python
"""The README's timing table from a record of scripts/time_to_verdict.py.

    python scripts/render_timing.py work/time-to-verdict/record.json              # print the table
    python scripts/render_timing.py work/time-to-verdict/record.json --write README.md

Method: one caption line (the machine's stack, its cores and the gate's worker count, the campaign,
the date), a table of the three figures per scenario (time to the first verdict, to the full forced
verdict, the rerun after a candidate edit), and a table of every stage's wall time per scenario and
phase with the state its kernel cache started in, from the stage records' provenance. ``--write``
replaces what lies between the ``<!-- time-to-verdict:begin -->`` and ``<!-- time-to-verdict:end -->``
lines of the file, indented as the first marker is; nothing else in the file changes. A phase that
was cut or failed shows as such; a stage that did not run in it as —.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from marked_block import replace_block  # noqa: E402

from kgate import protocol  # noqa: E402

BEGIN, END = "<!-- time-to-verdict:begin -->", "<!-- time-to-verdict:end -->"
SCHEMA = "kgate.time-to-verdict/1"
FIGURES = (("first_verdict_s", "time to the first verdict"), ("full_forced_verdict_s", "time to the full forced verdict"),
           ("rerun_after_edit_s", "rerun after a candidate edit (forced)"))
ORDER = ("doctor", *protocol.STAGES, "report")


def duration(s: float | None) -> str:
    if s is None:
        return "—"
    if s < 10:
        return f"{s:.1f} s"
    return f"{s:.0f} s" if s < 120 else f"{int(s // 60)} min {s % 60:.0f} s"


def _phase_note(ph: dict[str, Any] | None) -> str | None:
    if not ph:
        return "not run"
    if ph.get("status") != "done":
        return f"{ph.get('status')} after {duration(ph.get('wall_s'))}" if ph.get("wall_s") else str(ph.get("status"))
    return None


def _seed_note(sc: dict[str, Any] | None) -> str:
    """Where the seeded scenario's bundle came from, when it was given rather than exported from the cold run."""
    seed = (sc or {}).get("seed") or {}
    if not seed.get("given"):
        return ""
    size = f", {seed['bundle_bytes'] / 2**20:.1f} MiB" if seed.get("bundle_bytes") else ""
    return (f" The seeded scenario started from a bundle made on another machine of the same stack "
            f"(`{Path(seed['bundle']).name}`{size}), not from this run's cold scenario.")


def render(rec: dict[str, Any]) -> list[str]:
    if rec.get("schema") != SCHEMA:
        raise SystemExit(f"render_timing: not a {SCHEMA} record")
    m = rec["machine"]
    st = m["stack"]
    dev = st.get("gpu") or "CPU (Triton interpreter)"
    facts = ", ".join(f"{k} {st[v]}" for k, v in (("driver", "driver"), ("CUDA", "cuda"), ("torch", "torch"),
                                                    ("Triton", "triton")) if st.get(v))
    scen = list(rec["scenarios"])
    workers = m["gate_workers_auto"]
    gate = f"{workers} pytest-xdist workers" if workers > 1 else "one process (no pytest-xdist)"
    out = [f"Measured by `scripts/time_to_verdict.py` on {dev} ({facts}), {m['cores']} cores, gate runs in {gate}; "
           f"campaign `{rec['campaign']}`, started {rec['started_utc']}; cells: wall time (the kernel cache's state "
           "when the stage started)." + _seed_note(rec["scenarios"].get("seeded")),
           "", "| | " + " | ".join(scen) + " |", "|---|" + "---|" * len(scen)]
    for key, label in FIGURES:
        cells = []
        for s in scen:
            sc = rec["scenarios"][s]
            value = (sc.get("totals") or {}).get(key)
            need = {"first_verdict_s": ("first",), "full_forced_verdict_s": ("first", "forced"),
                    "rerun_after_edit_s": ("rerun",)}[key]
            notes = [n for p in need if (n := _phase_note(sc["phases"].get(p)))]
            cells.append(duration(value) if value is not None else ("; ".join(notes) or "—"))
        out.append(f"| {label} | " + " | ".join(cells) + " |")
    cols = [(s, p) for s in scen for p in ("full", "rerun")]
    out += ["", "| stage | " + " | ".join(f"{s}{' rerun' if p == 'rerun' else ''}" for s, p in cols) + " |",
            "|---|" + "---|" * len(cols)]
    for stage in ORDER:
        cells, any_ = [], False
        for s, p in cols:
            phases = rec["scenarios"][s]["phases"]
            rows = [r for ph in (("first", "forced") if p == "full" else ("rerun",))
                    for r in (phases.get(ph) or {}).get("stages", []) if r["stage"] == stage]
            if rows:
                any_ = True
                state = rows[0].get("cache_state")
                cells.append(" + ".join(duration(r["wall_s"]) for r in rows) + (f" ({state})" if state else ""))
            else:
                cells.append("—")
        if any_:
            out.append(f"| {stage} | " + " | ".join(cells) + " |")
    return out


def write(path: Path, lines: list[str]) -> None:
    replace_block(path, BEGIN, END, lines, "render_timing")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("record", help="a kgate.time-to-verdict/1 record")
    p.add_argument("--write", metavar="FILE", default=None, help="replace the marked block of FILE (e.g. README.md)")
    args = p.parse_args(argv)
    lines = render(json.loads(Path(args.record).read_text()))
    if args.write:
        write(Path(args.write), lines)
    else:
        print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
