"""``python -m kgate cache info|export|import``: one stack's kernel cache as a bundle, so a new node starts warm.

Usage::

    python -m kgate cache info                                   # this machine's stack and every cache under the root
    python -m kgate cache export picks.tar.gz [--kernels]         # autotune picks (and compiled kernels) of this stack
    python -m kgate cache import picks.tar.gz                     # refused, in one line, when the bundle's stack differs

The root is ``--kernel-cache``, else the profile's ``kernel_cache`` (``--profile``), else
``work/cache/kernels`` (relative to the current folder, the workdir). ``export --stack ID`` exports
another stack's folder under the root (e.g. on a login node without the GPU). Import checks the
bundle against the stack of the machine it runs on: run it where the stages run (a GPU node).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from kgate import paths
from kgate.cache import bundle
from kgate.cache import stack as stack_mod
from kgate.cache.stack import Stack
from kgate.cache.store import KernelCache
from kgate.errors import ConfigError


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="cache_command", required=True)
    for name, what in (("info", "this machine's stack and every stack's cache under the root"),
                       ("export", "write a bundle of one stack's autotune picks (and with --kernels its compiled "
                                  "kernels)"),
                       ("import", "check a bundle against this machine's stack and add its entries")):
        sp = sub.add_parser(name, help=what)
        sp.add_argument("--kernel-cache", default=None,
                        help=f"root of the kernel caches (default: the profile's kernel_cache, else {paths.KERNEL_CACHE})")
        sp.add_argument("--profile", default=None, help="read kernel_cache from this Snakemake profile's default-resources")
        if name == "info":
            sp.add_argument("--json", action="store_true", help="print kgate.cache-info/1 JSON instead of lines")
        if name == "export":
            sp.add_argument("bundle", help="the bundle to write (.tar, or .tar.gz/.tgz compressed)")
            sp.add_argument("--kernels", action="store_true", help="also carry compiled kernels and launchers")
            sp.add_argument("--stack", default=None, help="the stack id to export (default: this machine's)")
        if name == "import":
            sp.add_argument("bundle", help="a bundle written by kgate cache export")


def root_of(args: argparse.Namespace) -> Path:
    if args.kernel_cache:
        return Path(args.kernel_cache)
    if args.profile:
        from kgate.site.common import read_profile

        try:
            res = read_profile(args.profile)["default-resources"]
        except (OSError, ValueError) as exc:
            raise ConfigError(f"cache: cannot read profile {args.profile}: {exc}") from exc
        if res.get("kernel_cache"):  # type: ignore[union-attr]
            return Path(str(res["kernel_cache"]))  # type: ignore[index]
    return paths.KERNEL_CACHE


def run_cli(args: argparse.Namespace) -> int:
    root = root_of(args)
    here = stack_mod.detect()
    if args.cache_command == "info":
        data = bundle.info(root, here)
        if args.json:
            print(json.dumps(data, indent=1))
            return 0
        print(f"this machine: {here.describe()} (stack {here.id})")
        print(f"root: {root}")
        if not data["stacks"]:
            print("no kernel cache here yet")
        for s in data["stacks"]:
            c = s["counts"]
            print(f"{'*' if s['this_machine'] else ' '} {s['id']}  {s['state']:6}  {c['kernels']} kernels, "
                  f"{c['autotune']} autotune picks, {c['target_files']} target-cache files, "
                  f"{s['bytes'] / 2**20:.1f} MiB, {s['imported_entries']} imported  ({s['describe']})")
        return 0
    if args.cache_command == "export":
        stack = here
        if args.stack:
            man = paths.stack_manifest(root, args.stack)
            if not man.is_file():
                raise ConfigError(f"cache export: no stack {args.stack} under {root} (see python -m kgate cache info)")
            stack = Stack.from_dict(json.loads(man.read_text())["stack"])
        cache = KernelCache(root, stack)
        if not cache.folder.is_dir():
            raise ConfigError(f"cache export: no kernel cache for this machine's stack at {cache.folder} "
                              f"({stack.describe()}); see python -m kgate cache info")
        man = bundle.export(cache, Path(args.bundle), kernels=args.kernels)
        c = man["counts"]
        print(f"kgate cache export: {args.bundle}: {c['entries']} entries ({c['autotune']} autotune picks, "
              f"{c['target_files']} target-cache files{', with compiled kernels' if args.kernels else ''}) "
              f"of stack {stack.id} ({stack.describe()})")
        return 0
    got = bundle.import_bundle(root, Path(args.bundle), here)
    print(f"kgate cache import: {args.bundle}: {got.placed} entries added, {got.kept} already there, "
          f"{got.target_files} target-cache files, into {paths.stack_cache(root, here.id)} ({here.describe()})")
    return 0
