"""``python -m kgate <command>``: one subcommand per stage, plus verdict, report, doctor.

Usage::

    python -m kgate target --campaign-file config/campaigns/X.yaml --gpu cpu --record results/X/cpu/target/record.json
    python -m kgate verdict --check X --gpu cpu        # exit 0 GO, 1 NO-GO/STOPPED, 3 INCONCLUSIVE/SMOKE, 2 error
    python -m kgate candidate-id X                     # the candidate's content hash
    python -m kgate ncu-export X --gpu h200 --out DIR   # the ncu stage's CSV exports, for tests/data/ncu/
    python -m kgate plan --campaign X --gpu h200      # what a run would do, reuse and cost; writes nothing
    python -m kgate export --format pyperf REC.json    # a bench or model record's samples for pyperf or NVBench
    python -m kgate compare X --candidates A B         # two candidates side by side (or --records R1 R2, or GPUs)
    python -m kgate export --format nvbench|pyperf REC  # a bench/model record's samples for NVBench or pyperf
    python -m kgate model ... --calibration            # an A/A of the model stage by hand (docs/measurement.md)
    python -m kgate cache info|export|import ...       # the kernel cache of this stack, as a bundle (docs/cache.md)
    python -m kgate init --target C --base B --head H --name N  # a campaign from a change (docs/init.md)

A ``KgateError`` prints one line ``kgate: error: ...`` on stderr and exits 2;
any other exception is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from kgate import protocol
from kgate.errors import KgateError

STAGE_MODULES = {s: f"kgate.stages.{s}" for s in protocol.STAGES}


def cmd_candidate_id(args: argparse.Namespace) -> int:
    from kgate.campaign import load
    from kgate.source import candidate
    print(candidate.identity(load(args.campaign)))
    return 0


def build_parser() -> argparse.ArgumentParser:
    from kgate.stages.common import add_common_arguments
    p = argparse.ArgumentParser(prog="python -m kgate", description="Stage gates for GPU-kernel hypotheses.")
    sub = p.add_subparsers(dest="stage", required=True)
    for stage in protocol.STAGES:
        sp = sub.add_parser(stage, help=f"run stage {stage}")
        add_common_arguments(sp)
        if stage == "model":
            sp.add_argument("--calibration", action="store_true",
                            help="By hand only: an A/A calibration of the stage without the bench record (e.g. the "
                                 "identity candidate, which bench must fail); recorded as such, never GO.")
    from kgate.stages import report
    rp = sub.add_parser("report", help="compute the verdict and render the report")
    report.add_arguments(rp)
    vp = sub.add_parser("verdict", help="print the recorded verdict; --check sets the exit code")
    vp.add_argument("--check", metavar="CAMPAIGN", required=True)
    vp.add_argument("--gpu", default="cpu")
    cp = sub.add_parser("candidate-id", help="print the candidate's content hash")
    cp.add_argument("campaign")
    xp = sub.add_parser("compare", help="one campaign's gates and rows side by side: device classes, candidates or records")
    xp.add_argument("campaign", nargs="?", default=None, help="campaign name (results/<campaign>/); not with --records")
    xp.add_argument("--gpus", default=None, help="comma-separated device classes, in column order (default: all)")
    xp.add_argument("--root", default=".", help="the folder holding results/ and reports/ (default: .)")
    xp.add_argument("--candidate", default=None, help="candidate id to align the columns on")
    xp.add_argument("--candidates", nargs="+", metavar="ID", default=None,
                    help="two (or more) candidates of the campaign side by side, on one device class")
    xp.add_argument("--gpu", default=None, help="with --candidates: the device class (default: the one with them all)")
    xp.add_argument("--records", nargs="+", metavar="RECORD", default=None,
                    help="two (or more) record.json files of one campaign and stage side by side")
    from kgate import export
    ep = sub.add_parser("export", help="a bench or model record's samples as NVBench or pyperf JSON")
    export.add_arguments(ep)
    from kgate.stages import doctor
    dp = sub.add_parser("doctor", help="preflight: fail in seconds on a broken setup")
    doctor.add_arguments(dp)
    from kgate import plan
    plan.add_arguments(sub.add_parser("plan", help="what a run would do before it starts: reuse, run, blocked, GPU "
                                                   "time (writes nothing)"))
    from kgate import audit
    ap = sub.add_parser("audit", help="overlap of campaigns on one target (exit 0 none, 1 overlap, 2 error)")
    audit.add_arguments(ap)
    from kgate.cache import cli as cache_cli
    cache_cli.add_arguments(sub.add_parser("cache", help="this stack's kernel cache: info, or a bundle to export "
                                                         "or import (docs/cache.md)"))
    from kgate.init import cli as init_cli
    init_cli.add_arguments(sub.add_parser("init", help="write a campaign from a change: base commit, head commit or "
                                                       "checkout (docs/init.md)"))
    from kgate.ncu import export as ncu_export
    np_ = sub.add_parser("ncu-export", help="an ncu stage's CSV exports and their provenance, for tests/data/ncu/")
    ncu_export.add_arguments(np_)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.stage in STAGE_MODULES:
            from kgate.stages.common import execute
            mod = importlib.import_module(STAGE_MODULES[args.stage])
            return execute(args.stage, mod.run, args)
        if args.stage == "report":
            from kgate.stages import report
            return report.run_cli(args)
        if args.stage == "verdict":
            from kgate import verdict
            return verdict.check(args.check, args.gpu)
        if args.stage == "candidate-id":
            return cmd_candidate_id(args)
        if args.stage == "compare":
            from kgate.report import compare, compare_runs
            if args.candidates or args.records:
                return compare_runs.run_cli(args.campaign, args.candidates, args.records, args.gpu, args.root)
            return compare.run_cli(args)
        if args.stage == "export":
            from kgate import export
            return export.run_cli(args)
        if args.stage == "doctor":
            from kgate.stages import doctor
            return doctor.run_doctor(args)
        if args.stage == "plan":
            from kgate import plan
            return plan.run_cli(args)
        if args.stage == "audit":
            from kgate import audit
            return audit.run_audit(args)
        if args.stage == "cache":
            from kgate.cache import cli as cache_cli
            return cache_cli.run_cli(args)
        if args.stage == "init":
            from kgate.init import cli as init_cli
            return init_cli.run_cli(args)
        if args.stage == "ncu-export":
            from kgate.ncu import export as ncu_export
            return ncu_export.run_cli(args)
    except KgateError as exc:
        print(f"kgate: error: {exc}", file=sys.stderr)
        return 2
    return 2
