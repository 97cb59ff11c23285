"""Re-render the committed H200 reports from the committed records they were made from.

Usage::

    python scripts/render_reports.py                 # rewrite reports/<campaign>/h200/ for every input file
    python scripts/render_reports.py --out /tmp/r    # write <out>/reports/<campaign>/<gpu>/ instead

Method: each ``tests/data/reports/<campaign>.<gpu>.json`` (``kgate.report-inputs/1``, its README says
what every key is) names the records, the verdict (a committed file, or computed from the records by
``kgate.verdict.compute`` with the campaign's hypothesis, as ``python -m kgate report`` does), the
candidate history and the epoch ledger; ``load`` reads them and ``render_into`` hands them to
``kgate.report.render`` with no other device classes. ``tests/test_report_budget.py`` imports this
file, so the budget test and the committed report use the same inputs. Limit: the links into
``results/`` and ``logs/`` point at the run machine's tree, as they did when the reports were first written.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kgate import paths, report, verdict
from kgate.campaign import load as load_campaign
from kgate.errors import IncompleteData
from kgate.records import read_record, read_verdict, write_json

ROOT = Path(__file__).resolve().parents[1]
INPUTS = ROOT / "tests" / "data" / "reports"
SCHEMA = "kgate.report-inputs/1"


@dataclass(frozen=True)
class Inputs:
    """What one committed report is rendered from."""

    verdict: dict[str, Any]
    records: list[dict[str, Any]]
    history: list[dict[str, Any]]
    ledger: dict[str, Any]


def input_files() -> list[Path]:
    """Every inputs file, one per committed report."""
    return sorted(INPUTS.glob("*.json"))


def load(path: Path) -> Inputs:
    """Read one inputs file and the records and verdict it names."""
    spec = json.loads(Path(path).read_text())
    if spec.get("schema") != SCHEMA:
        msg = f"{path}: schema {spec.get('schema')!r} is not {SCHEMA!r}"
        raise IncompleteData(msg)
    records = [read_record(ROOT / p) for p in spec["records"]]
    if spec.get("verdict"):
        v = read_verdict(ROOT / spec["verdict"])
    else:
        v = verdict.compute(records, campaign=spec["campaign"], gpu=spec["gpu"], candidate=spec.get("candidate"),
                            forced=bool(spec.get("forced")))
        camp = load_campaign(ROOT / spec["campaign_file"], {"target_path": None, "candidate": None})
        v["hypothesis"] = camp.data["hypothesis"]
    return Inputs(v, records, list(spec.get("history") or []), dict(spec.get("ledger") or {}))


def render_into(inputs: Inputs, root: Path) -> Path:
    """Write verdict.json and the report into ``root/reports/<campaign>/<gpu>/``; return that folder."""
    out = Path(root) / paths.report_dir(inputs.verdict["campaign"], inputs.verdict["gpu"])
    write_json(out / "verdict.json", inputs.verdict)
    report.render(inputs.verdict, inputs.records, out, history=inputs.history, devices=(), ledger=inputs.ledger)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT, help="folder that gets reports/<campaign>/<gpu>/")
    args = parser.parse_args(argv)
    for path in input_files():
        print(render_into(load(path), args.out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
