"""``python -m kgate <command>``: one subcommand per stage, plus verdict, report, doctor.

Usage::

    python -m kgate target --campaign-file config/campaigns/X.yaml --gpu cpu --record results/X/cpu/target/record.json
    python -m kgate verdict --check X --gpu cpu        # exit 0 GO, 1 NO-GO/STOPPED, 3 INCONCLUSIVE/SMOKE, 2 error
    python -m kgate candidate-id X                     # the candidate's content hash
    python -m kgate ncu-export X --gpu h200 --out DIR   # the ncu stage's CSV exports, for tests/data/ncu/
    python -m kgate model ... --calibration            # an A/A of the model stage by hand (docs/measurement.md)

A ``KgateError`` prints one line ``kgate: error: ...`` on stderr and exits 2;
any other exception is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path
from typing import Any

from kgate import paths
from kgate.errors import KgateError

STAGE_MODULES = {s: f"kgate.{s}" for s in paths.STAGES}


def _history(campaign: str, gpu: str) -> list[dict[str, Any]]:
    """Every candidate iteration recorded for this campaign and GPU, oldest first."""
    out = []
    for rec_path in sorted((Path("results") / campaign / gpu / "candidate_build").glob("*/record.json")):
        build = json.loads(rec_path.read_text())
        gate_path = paths.record(campaign, gpu, "candidate_gate", build["candidate"])
        gate_rec = json.loads(gate_path.read_text()) if gate_path.exists() else None
        out.append({"candidate": build["candidate"], "created_utc": build["provenance"]["finished_utc"],
                    "source": build["data"].get("source"), "candidate_sha": build["data"].get("candidate_sha"),
                    "build": build["status"], "gate": gate_rec["status"] if gate_rec else "not run",
                    "numbers": {g["name"]: g["value"] for g in (gate_rec or build)["gates"]}})
    return sorted(out, key=lambda h: h["created_utc"])


def cmd_report(args: argparse.Namespace) -> int:
    from kgate import report, verdict
    from kgate.campaign import load
    from kgate.records import read_record, write_json

    camp = load(args.campaign_file, {"target_path": args.target_path, "candidate": args.candidate_source})
    records = [read_record(r) for r in args.records]
    v = verdict.compute(records, campaign=camp.name, gpu=args.gpu, candidate=args.candidate, forced=args.force)
    v["hypothesis"] = camp.data["hypothesis"]
    out = Path(args.out)
    write_json(out / "verdict.json", v)
    if args.iteration_copy:
        write_json(Path(args.iteration_copy), v)
    report.render(v, records, out, history=_history(camp.name, args.gpu))
    print(f"kgate report: {v['verdict']}: {v['sentence']}")
    return 0


def cmd_candidate_id(args: argparse.Namespace) -> int:
    from kgate import candidate
    from kgate.campaign import load
    print(candidate.identity(load(args.campaign)))
    return 0


def build_parser() -> argparse.ArgumentParser:
    from kgate.stage import add_common_arguments
    p = argparse.ArgumentParser(prog="python -m kgate", description="Stage gates for GPU-kernel hypotheses.")
    sub = p.add_subparsers(dest="stage", required=True)
    for stage in paths.STAGES:
        sp = sub.add_parser(stage, help=f"run stage {stage}")
        add_common_arguments(sp)
        if stage == "model":
            sp.add_argument("--calibration", action="store_true",
                            help="By hand only: an A/A calibration of the stage without the bench record (e.g. the "
                                 "identity candidate, which bench must fail); recorded as such, never GO.")
    rp = sub.add_parser("report", help="compute the verdict and render the report")
    rp.add_argument("--campaign-file", required=True)
    rp.add_argument("--gpu", required=True)
    rp.add_argument("--candidate", default=None)
    rp.add_argument("--candidate-source", default=None)
    rp.add_argument("--target-path", default=None)
    rp.add_argument("--force", action="store_true")
    rp.add_argument("--out", required=True)
    rp.add_argument("--local-rule", action="store_true")
    rp.add_argument("--iteration-copy", default=None, help="Also write the verdict here (results/.../report/<id>/).")
    rp.add_argument("records", nargs="*")
    vp = sub.add_parser("verdict", help="print the recorded verdict; --check sets the exit code")
    vp.add_argument("--check", metavar="CAMPAIGN", required=True)
    vp.add_argument("--gpu", default="cpu")
    cp = sub.add_parser("candidate-id", help="print the candidate's content hash")
    cp.add_argument("campaign")
    xp = sub.add_parser("compare", help="one campaign's gates and rows side by side across device classes")
    xp.add_argument("campaign", help="campaign name (results/<campaign>/)")
    xp.add_argument("--gpus", default=None, help="comma-separated device classes, in column order (default: all)")
    xp.add_argument("--root", default=".", help="the folder holding results/ and reports/ (default: .)")
    xp.add_argument("--candidate", default=None, help="candidate id to align the columns on")
    from kgate import doctor
    dp = sub.add_parser("doctor", help="preflight: fail in seconds on a broken setup")
    doctor.add_arguments(dp)
    from kgate import audit
    ap = sub.add_parser("audit", help="overlap of campaigns on one target (exit 0 none, 1 overlap, 2 error)")
    audit.add_arguments(ap)
    from kgate import ncu_export
    np_ = sub.add_parser("ncu-export", help="an ncu stage's CSV exports and their provenance, for tests/data/ncu/")
    ncu_export.add_arguments(np_)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.stage in STAGE_MODULES:
            from kgate.stage import execute
            mod = importlib.import_module(STAGE_MODULES[args.stage])
            return execute(args.stage, mod.run, args)
        if args.stage == "report":
            return cmd_report(args)
        if args.stage == "verdict":
            from kgate import verdict
            return verdict.check(args.check, args.gpu)
        if args.stage == "candidate-id":
            return cmd_candidate_id(args)
        if args.stage == "compare":
            from kgate import compare
            return compare.run_cli(args)
        if args.stage == "doctor":
            from kgate import doctor
            return doctor.run_doctor(args)
        if args.stage == "audit":
            from kgate import audit
            return audit.run_audit(args)
        if args.stage == "ncu-export":
            from kgate import ncu_export
            return ncu_export.run_cli(args)
    except KgateError as exc:
        print(f"kgate: error: {exc}", file=sys.stderr)
        return 2
    return 2
