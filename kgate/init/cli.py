"""``python -m kgate init``: a campaign from a change (base commit, head commit or checkout).

Prints one line per decision (``decided``, ``left out``, ``warning``), one per
value left to fill in (``TODO``), and the static check of the written
campaign (``check``). Exit 0 when the campaign was written (TODOs or not), 2
on an error (one ``kgate: error:`` line, e.g. a change that edits the
correctness contract without ``--test-edits``). docs/init.md.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from kgate import paths
from kgate.errors import ConfigError
from kgate.init import change as change_mod
from kgate.init import compose, write

_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,63}$")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", required=True, help="your clone of the target (only read, never written)")
    p.add_argument("--base", required=True, help="the baseline commit (any revision; written as its full SHA)")
    p.add_argument("--head", required=True,
                   help="the change: a ref or commit of the clone (a `ref:` candidate), or the folder of a checkout "
                        "whose files are the change (a `worktree:` candidate)")
    p.add_argument("--name", required=True, help="the campaign's name (lower case letters, digits, dashes)")
    p.add_argument("--op", default=None, help="the public endpoint to time, module.path:function (default: the "
                                              "registry entry whose code the change touches, if exactly one)")
    p.add_argument("--test-edits", choices=compose.TEST_EDITS, default="refuse",
                   help="what to do with a change to the correctness contract (an edited or deleted existing test, "
                        "a tolerance, a conftest or test helper, a reference implementation the tests import): "
                        "refuse (default: init stops, naming each file), fixture (freeze the edited version at "
                        "BENCH_BASE: the baseline must pass it), omit (leave it out; the gate keeps the base version)")
    p.add_argument("--dependent-helper", default=None, metavar="PATH|none",
                   help="the target's script that lists the tests depending on changed files (default: a known "
                        "one the target has, e.g. fla's scripts/find_dependent_tests.py; none: find them from imports)")
    p.add_argument("--gate", default=None, metavar="PATH[,PATH...]",
                   help="the gate's test files (at the base), instead of the covering tests init finds; frozen "
                        "paths follow from these (a gate narrower than the dependent tests is the user's choice)")
    p.add_argument("--cpu-select", default=None, metavar="EXPR|all",
                   help="gate.select.cpu, the -k expression of the gate on CPU (all: every test); default: every "
                        "test when a collection of the gate finds few, else a TODO")
    p.add_argument("--root", type=Path, default=paths.PROJECT,
                   help="the folder that receives config/campaigns/<name>.yaml, kernels/<name>/ and init's scratch "
                        "work/init/<name>/ (default: this kgate checkout)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing campaign of this name (kgate's files)")


def run_cli(args: argparse.Namespace) -> int:
    if not _NAME.match(args.name):
        raise ConfigError(f"--name: '{args.name}' must be lower case letters, digits and dashes (at most 64)")
    opts = compose.Options(target=args.target, base=args.base, head=args.head, name=args.name, op=args.op,
                           test_edits=args.test_edits, helper=args.dependent_helper, cpu_select=args.cpu_select,
                           gate=tuple(t for t in args.gate.split(",") if t) if args.gate else None,
                           root=args.root.resolve())
    ch = change_mod.read(opts.target, opts.base, opts.head)
    trees = change_mod.checkout_trees(ch, opts.root, opts.name)
    plan = compose.compose(opts, ch, trees)
    lines = write.write(plan, ch, args.overwrite)
    print(f"kgate init: wrote {plan.campaign_file} and {plan.kernels_dir}/")
    for tag, text in lines:
        print(f"{tag}: {text}")
    return 0
