#!/usr/bin/env python
"""The README's replay table from config/replays.yaml and each replayed campaign's committed report.

    python scripts/render_replays.py --gpu h200                     # print the table
    python scripts/render_replays.py --gpu h200 --write README.md   # replace the marked block

Method: one row per entry of config/replays.yaml (kgate/schemas/replays.schema.yaml), in its order: the change
(repository, commit, pull request), the authors' claim as quoted there, the campaign's bar (``measure.bar`` of
config/campaigns/<campaign>.yaml), and from ``reports/<campaign>/<gpu>/verdict.json`` (kgate.verdict/1) the verdict
(``FORCED`` runs say so), the gate and the sentence that decided it with that gate's detail (cut at 160
characters), and the benchmark's geomean when bench measured one and another gate decided; an entry's ``forced``
record (a run forced past a STOP) adds its bench geomean, said to be forced. A campaign without a report on that
device says "not run on <gpu>", with the entry's ``not_run`` reason; an INCONCLUSIVE report adds the entry's
``incomplete`` reason. The campaign's committed reports on other device classes (``reports/<campaign>/<other>/``)
follow, each as its verdict, deciding gate and bench geomean. ``--write`` replaces what lies between the
``<!-- replays:begin -->`` and ``<!-- replays:end -->`` lines of the file; nothing else changes.
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

from kgate import campaign  # noqa: E402
from kgate.errors import KgateError  # noqa: E402
from kgate.records import read_record  # noqa: E402

BEGIN, END = "<!-- replays:begin -->", "<!-- replays:end -->"
VERDICT_SCHEMA = "kgate.verdict/1"


def load_replays(path: Path) -> list[dict[str, Any]]:
    data = campaign.load_yaml(path)
    campaign.validate(data, "replays", str(path))
    return list(data["replays"])


def cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def geomean(verdict: dict[str, Any]) -> str | None:
    """The benchmark's geomean speedup with its interval and status, when bench measured one."""
    for g in verdict.get("gates", []):
        if g.get("stage") == "bench" and g.get("name") == "geomean_speedup" and isinstance(g.get("value"), float):
            iv = g.get("interval") or []
            span = f" [{iv[0]:.3f}, {iv[1]:.3f}]" if len(iv) == 2 else ""
            return f"{g['value']:.3f}x{span} ({g.get('status')})"
    return None


def deciding_detail(verdict: dict[str, Any], limit: int = 160) -> str | None:
    """The detail of the gate that decided the verdict (e.g. which row was SLOW), on one line, cut at ``limit``."""
    by = verdict.get("decided_by") or {}
    for g in verdict.get("gates", []):
        if (g.get("stage"), g.get("name")) == (by.get("stage"), by.get("gate")) and g.get("detail"):
            text = " ".join(str(g["detail"]).split())
            return text if len(text) <= limit else text[:limit - 3] + "..."
    return None


def forced_bench(path: Path) -> str:
    """The forced run's bench geomean from its record (kgate.stage/1), said to be forced."""
    if not path.exists():
        raise SystemExit(f"render_replays: {path}: no such bench record (config/replays.yaml forced.bench_record)")
    try:
        rec = read_record(path)
    except KgateError as exc:
        raise SystemExit(f"render_replays: {path} (config/replays.yaml forced.bench_record): {exc}") from exc
    if rec.get("stage") != "bench":
        raise SystemExit(f"render_replays: {path}: a {rec.get('stage')!r} record, not bench's "
                         "(config/replays.yaml forced.bench_record)")
    gm = geomean({"gates": [dict(g, stage="bench") for g in rec.get("gates", [])]})
    return f"forced past it, bench geomean {gm}" if gm else "forced past it, bench measured no geomean"


def read_verdict(path: Path) -> dict[str, Any]:
    v = json.loads(path.read_text())
    if v.get("schema") != VERDICT_SCHEMA:
        raise SystemExit(f"render_replays: {path}: schema {v.get('schema')!r}, not {VERDICT_SCHEMA}")
    return v


def elsewhere(root: Path, campaign_name: str, gpu: str) -> list[str]:
    """The campaign's committed reports on other device classes, one short phrase each: verdict, deciding gate
    (when one decided) and bench geomean."""
    out = []
    for path in sorted((root / "reports" / campaign_name).glob("*/verdict.json")):
        if path.parent.name == gpu:
            continue
        v = read_verdict(path)
        by = v.get("decided_by") or {}
        text = f"on {path.parent.name}: {v['verdict']}" + (" (forced)" if v.get("forced") else "")
        if by.get("stage"):
            text += f" at {by['stage']}" + (f" {by['gate']}" if by.get("gate") else "")
        if gm := geomean(v):
            text += f", bench geomean {gm}"
        out.append(text)
    return out


def row(entry: dict[str, Any], root: Path, gpu: str) -> str:
    data = campaign.load_yaml(root / "config" / "campaigns" / f"{entry['campaign']}.yaml")
    bar = (data.get("measure") or {}).get("bar")
    pr = f" (#{entry['pull_request']})" if entry.get("pull_request") else ""
    change = f"{entry['repository']} `{entry['commit'][:8]}`{pr}: {entry['change']}"
    path = root / "reports" / entry["campaign"] / gpu / "verdict.json"
    if not path.exists():
        result, decided = f"not run on {gpu}", entry.get("not_run") or "—"
    else:
        v = read_verdict(path)
        result = f"**{v['verdict']}**" + (" (forced)" if v.get("forced") else "")
        by = v.get("decided_by") or {}
        decided = str(v.get("sentence") or "")
        if by.get("stage") and not decided.startswith(f"{by['stage']}:"):
            decided = f"{by['stage']}: {decided}"
        detail = deciding_detail(v)
        if detail:
            decided += f": {detail}"
        if v["verdict"] == "INCONCLUSIVE" and entry.get("incomplete"):
            decided += f" ({entry['incomplete']})"
        gm = geomean(v)
        if gm and (by.get("stage"), by.get("gate")) != ("bench", "geomean_speedup"):
            decided += f"; bench geomean {gm}"
        forced = entry.get("forced") or {}
        if forced.get("gpu") == gpu and not gm:
            decided += f"; {forced_bench(root / forced['bench_record'])}"
    if other := elsewhere(root, entry["campaign"], gpu):
        decided += "; " + "; ".join(other)
    return "| " + " | ".join(cell(c) for c in (f"`{entry['campaign']}`", change, entry["claim"],
                                                 "—" if bar is None else str(bar), result, decided)) + " |"


def table(root: Path, gpu: str) -> list[str]:
    entries = load_replays(root / "config" / "replays.yaml")
    return [f"| campaign | change | the authors' claim | bar | {gpu} verdict | what decided it |",
            "|---|---|---|---|---|---|", *(row(e, root, gpu) for e in entries)]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gpu", default="h200", help="the device class whose reports fill the table")
    p.add_argument("--write", metavar="FILE", default=None, help="replace the marked block of FILE (e.g. README.md)")
    p.add_argument("--root", type=Path, default=REPO, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    lines = table(args.root, args.gpu)
    if args.write:
        replace_block(Path(args.write), BEGIN, END, lines, "render_replays")
    else:
        print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
