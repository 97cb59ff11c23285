"""``python -m kgate report``: the workflow's last rule: compute the verdict, write it, render the report.

Usage::

    python -m kgate report --campaign-file config/campaigns/X.yaml --gpu h200 --candidate ID \\
        --out reports/X/h200 results/X/h200/target/record.json ...

Method: the records given (each read with ``kgate.records.read_record``) make
the verdict (``kgate.verdict.compute``), which gets the campaign's hypothesis
and is written to ``<out>/verdict.json`` (and to ``--iteration-copy``, the
candidate's copy under results/). ``kgate.report.render`` then writes
index.html, summary.md and gates.junit.xml beside it, with the candidate
history of this campaign and device class (``history``). Not a stage of the
protocol: it records nothing, and no module imports it (the CLI dispatches to
``run_cli``).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from kgate import paths, report, verdict
from kgate.campaign import load
from kgate.records import read_record, write_json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--campaign-file", required=True)
    parser.add_argument("--gpu", required=True)
    parser.add_argument("--candidate", default=None)
    parser.add_argument("--candidate-source", default=None)
    parser.add_argument("--target-path", default=None)
    parser.add_argument("--force", action="store_true")
    parser.add_argument("--out", required=True)
    parser.add_argument("--local-rule", action="store_true")
    parser.add_argument("--iteration-copy", default=None, help="Also write the verdict here (results/.../report/<id>/).")
    parser.add_argument("records", nargs="*")


def history(campaign: str, gpu: str) -> list[dict[str, Any]]:
    """Every candidate iteration recorded for this campaign and GPU, oldest first.

    One entry per candidate_build record (``results/<campaign>/<gpu>/candidate_build/<id>/record.json``):
    its id, when the build finished, source and SHA, the build's status, the
    candidate_gate's status (``not run`` without a record) and the gate values
    of the candidate_gate record (else of the build record).
    """
    out = []
    folder = paths.stage_root(campaign, gpu, "candidate_build")
    candidates = sorted(p.name for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []
    for cand in candidates:
        rec_path = paths.record(campaign, gpu, "candidate_build", cand)
        if not rec_path.is_file():
            continue
        build = read_record(rec_path)
        gate_path = paths.record(campaign, gpu, "candidate_gate", build["candidate"])
        gate_rec = read_record(gate_path) if gate_path.exists() else None
        out.append({"candidate": build["candidate"], "created_utc": build["provenance"]["finished_utc"],
                    "source": build["data"].get("source"), "candidate_sha": build["data"].get("candidate_sha"),
                    "build": build["status"], "gate": gate_rec["status"] if gate_rec else "not run",
                    "numbers": {g["name"]: g["value"] for g in (gate_rec or build)["gates"]}})
    return sorted(out, key=lambda h: h["created_utc"])


def run_cli(args: argparse.Namespace) -> int:
    """Compute and write the verdict, render the report, print the verdict line; 0 whatever the verdict."""
    camp = load(args.campaign_file, {"target_path": args.target_path, "candidate": args.candidate_source})
    records = [read_record(r) for r in args.records]
    v = verdict.compute(records, campaign=camp.name, gpu=args.gpu, candidate=args.candidate, forced=args.force)
    v["hypothesis"] = camp.data["hypothesis"]
    out = Path(args.out)
    write_json(out / "verdict.json", v)
    if args.iteration_copy:
        write_json(Path(args.iteration_copy), v)
    report.render(v, records, out, history=history(camp.name, args.gpu))
    print(f"kgate report: {v['verdict']}: {v['sentence']}")
    return 0
