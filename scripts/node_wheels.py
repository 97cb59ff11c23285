#!/usr/bin/env python
"""Wheels for a GPU node without network: this environment's packages, for the node's Python, minus the node's own.

    python scripts/node_wheels.py --out wheelhouse --python-version 3.12 --node-has node-freeze.txt \\
        [--exclude NAME ...] [--dry-run]
    # on the node: scripts/node-run.sh setup --wheels wheelhouse --kgate

Method: the packages are this environment's (``pip freeze --exclude-editable``: kgate's dependencies as
installed here, pinned to the versions the tests ran with), less every package the node already has
(``--node-has``: the node's ``python -m pip freeze`` or ``pip list --format=freeze``, names compared as
PEP 503 normalised names; the node's version wins, as a second copy installed with ``--no-deps`` would
shadow the one its torch was built with), less those named by ``--exclude`` and less what only a GPU image
provides (:data:`NODE_ONLY`). Each remaining pin is downloaded as a wheel for the node's CPython version
on manylinux x86_64 (``pip download --only-binary=:all: --python-version ... --platform ...``); a package
that ships no such wheel (only an sdist, e.g. connection_pool 0.0.3) is built here with ``pip wheel
--no-deps``, which is right for pure-Python sdists only. At the end the wheelhouse is listed largest first
with its total size.

Without ``--node-has`` the wheelhouse may hold packages the node has; ``node-run.sh setup`` skips those
(unless ``--replace-installed``), so the node's versions win there too.

Limits: the platform tags are manylinux x86_64 (no aarch64 nodes); a package whose import needs another
the node lacks is found by ``node-run.sh setup``'s import check on the node, not here; the download needs
this machine's package index.
"""

from __future__ import annotations

import argparse
import fnmatch
import re
import subprocess
import sys
from pathlib import Path

from packaging.utils import canonicalize_name

#: what a CUDA image brings and a CPU environment must never send it (a CPU torch would replace the CUDA one)
NODE_ONLY = ("torch", "triton", "nvidia-*", "cuda-*")
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "any")
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;]+)$")


def parse_freeze(text: str, source: str) -> dict[str, str]:
    """``name==version`` lines (comments, blank lines and ``-e``/URL lines skipped) as {normalised name: pin}."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", "-e ", "--")) or " @ " in line:
            continue
        m = _PIN.match(line)
        if not m:
            raise SystemExit(f"node_wheels: {source}: not a 'name==version' line: {line!r}")
        out[canonicalize_name(m.group(1))] = f"{m.group(1)}=={m.group(2)}"
    return out


def wanted(here: dict[str, str], node: dict[str, str], exclude: list[str]) -> list[str]:
    """The pins of ``here`` the node lacks, less ``exclude`` and :data:`NODE_ONLY` (globs on normalised names)."""
    drop = [canonicalize_name(e) if "*" not in e else e.lower() for e in (*NODE_ONLY, *exclude)]
    return [pin for name, pin in sorted(here.items())
            if name not in node and not any(fnmatch.fnmatchcase(name, d) for d in drop)]


def fetch(pin: str, out: Path, python_version: str) -> str:
    """Download ``pin``'s wheel for the node, else build it from its sdist; returns how it came."""
    abi = "cp" + python_version.replace(".", "")
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check", "--no-deps",
           "--only-binary=:all:", "--python-version", python_version, "--implementation", "cp", "--abi", abi,
           *(a for p in PLATFORMS for a in ("--platform", p)), "-d", str(out), pin]
    if subprocess.run(cmd, capture_output=True, text=True).returncode == 0:
        return "wheel"
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--disable-pip-version-check", "--no-deps",
                            "-w", str(out), pin], capture_output=True, text=True)
    if built.returncode != 0:
        raise SystemExit(f"node_wheels: {pin}: no wheel for CPython {python_version} on manylinux x86_64 and "
                         f"no sdist that builds: {built.stderr.strip().splitlines()[-1:]}")
    return "built from its sdist"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, type=Path, help="the wheelhouse folder (created)")
    p.add_argument("--python-version", required=True, help="the node's Python, major.minor (e.g. 3.12)")
    p.add_argument("--node-has", type=Path, default=None,
                   help="the node's `python -m pip freeze` output: packages it has are not carried")
    p.add_argument("--exclude", action="append", default=[], help="a package (or glob) not to carry (repeatable)")
    p.add_argument("--dry-run", action="store_true", help="print the pins it would fetch and stop")
    args = p.parse_args(argv)
    if not re.fullmatch(r"3\.\d+", args.python_version):
        p.error(f"--python-version {args.python_version!r}: major.minor, e.g. 3.12")
    if args.node_has is not None and not args.node_has.is_file():
        p.error(f"--node-has {args.node_has}: no such file")
    freeze = subprocess.run([sys.executable, "-m", "pip", "freeze", "--exclude-editable"], capture_output=True,
                            text=True, check=True).stdout
    here = parse_freeze(freeze, "pip freeze")
    node = parse_freeze(args.node_has.read_text(), str(args.node_has)) if args.node_has else {}
    pins = wanted(here, node, args.exclude)
    if args.dry_run:
        print("\n".join(pins))
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    for pin in pins:
        print(f"node_wheels: {pin}: {fetch(pin, args.out, args.python_version)}", flush=True)
    sizes = sorted(((f.stat().st_size, f.name) for f in args.out.glob("*.whl")), reverse=True)
    for size, name in sizes:
        print(f"{size / 1e6:8.1f} MB  {name}")
    print(f"node_wheels: {len(sizes)} wheel(s), {sum(s for s, _ in sizes) / 1e6:.1f} MB in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
