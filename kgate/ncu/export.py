"""``python -m kgate ncu-export``: an ncu stage's CSV exports, named and described for tests/data/ncu/.

Usage::

    python -m kgate ncu-export C --gpu h200 --out tests/data/ncu/h200-C
    python -m kgate ncu-export C --gpu h200 --candidate 3f2a9c1e0b7d --out DIR --reexport

Method: reads the stage record ``results/<campaign>/<gpu>/ncu/<candidate>/record.json``
(the only candidate there when ``--candidate`` is not given). For every
profiled row, arm and pass it copies the CSV exports the stage made from its
``.ncu-rep`` (``ncu --import R --csv --page raw`` and ``--page details``) to
``<out>/<row>.<arm>.<pass>.<page>.csv``; with ``--reexport`` it runs those
exports again from the ``.ncu-rep`` with this machine's ncu. ``PROVENANCE.json``
beside them says where they come from: the device, the ncu version, the
BENCH_BASE and candidate SHAs, the kernel filter and every command. The
``.ncu-rep`` files themselves stay under results/.

:func:`export_commands` is the one place that says how a report becomes CSV;
the ncu stage exports with it right after each pass.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
from pathlib import Path
from typing import Any

from kgate import paths
from kgate.errors import IncompleteData, KgateError
from kgate.ncu.lookup import find_ncu
from kgate.records import read_record, write_json


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("campaign", help="campaign name (results/<campaign>/)")
    p.add_argument("--gpu", required=True, help="device class of the run (h200, b300, ...)")
    p.add_argument("--candidate", default=None, help="candidate id (default: the only one recorded)")
    p.add_argument("--root", default=".", help="the folder holding results/ (default: .)")
    p.add_argument("--out", required=True, help="folder to write the CSVs and PROVENANCE.json into")
    p.add_argument("--reexport", action="store_true", help="export again from the .ncu-rep files with this ncu")


def export_commands(exe: str, rep: Path) -> dict[str, list[str]]:
    """The CSV exports of one report: ``--page raw`` (every metric) and ``--page details`` (sections, rules).

    Kernel names are printed demangled (``--print-kernel-base demangled``), the basis the stage's filter
    matched and torch.profiler reports, so the campaign's regexes select the same kernels in the exports:
    ncu's default print base (``function``) drops namespaces and template arguments. A Triton kernel's name
    is the same under either base."""
    return {page: [exe, "--import", str(rep), "--csv", "--page", page, "--print-kernel-base", "demangled"]
            for page in ("raw", "details")}


def stage_record(root: Path, campaign: str, gpu: str, candidate: str | None) -> Path:
    """The ncu record of ``candidate`` under ``root``, else the only one there (IncompleteData otherwise)."""
    base = root / paths.stage_root(campaign, gpu, "ncu")
    if candidate:
        return base / candidate / "record.json"
    found = sorted(base.glob("*/record.json"))
    if len(found) != 1:
        raise IncompleteData(f"{base}: {len(found)} ncu records ({', '.join(p.parent.name for p in found) or 'none'});"
                             " name one with --candidate")
    return found[0]


def export(record: dict[str, Any], root: Path, out: Path, reexport: bool = False) -> list[Path]:
    """Write every profile's CSVs and PROVENANCE.json into ``out``; return the CSV paths."""
    data = record["data"]
    if not data.get("available"):
        raise IncompleteData(f"the ncu record is '{record['status']}' with nothing to export: {data.get('reason')}")
    exe = find_ncu() if reexport else None
    if reexport and exe is None:
        raise KgateError("--reexport: ncu not found here (PATH, /usr/local/cuda/bin, /opt/nvidia, KGATE_NCU)")
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    profiles = []
    for entry in data["rows"]:
        for arm, passes in entry["passes"].items():
            for name, run in passes.items():
                for page, exp in run["exports"].items():
                    target = out / f"{entry['row']}.{arm}.{name}.{page}.csv"
                    if exe is not None:
                        cmd = export_commands(exe, root / run["rep"])[page]
                        with target.open("w") as fh:
                            proc = subprocess.run(cmd, stdout=fh, stderr=subprocess.PIPE, text=True, timeout=600)
                        if proc.returncode != 0:
                            raise KgateError(f"{' '.join(cmd)} failed: {proc.stderr.strip()[-300:]}")
                    else:
                        shutil.copyfile(root / exp["path"], target)
                    written.append(target)
                profiles.append({"row": entry["row"], "arm": arm, "pass": name, "command": run["command"],
                                 "exports": {p: e["command"] for p, e in run["exports"].items()},
                                 "rep": run["rep"], "launches": run["launches"], "wall_s": run["wall_s"]})
    write_json(out / "PROVENANCE.json", {
        "what": "Nsight Compute CSV exports written by kgate's ncu stage (real data)",
        "campaign": record["campaign"], "gpu": record["gpu"], "candidate": record["candidate"],
        "candidate_sha": data.get("candidate_sha"), "bench_base": data.get("bench_base"),
        "device": data.get("device"), "ncu": data.get("ncu"), "clock_control": data.get("clock_control"),
        "kernel_filter": data.get("kernel_filter"), "mode": data.get("mode"), "warm_calls": data.get("warm_calls"),
        "profiles": profiles, "files": sorted(p.name for p in written)})
    return written


def run_cli(args: argparse.Namespace) -> int:
    root = Path(args.root)
    path = stage_record(root, args.campaign, args.gpu, args.candidate)
    written = export(read_record(path), root, Path(args.out), reexport=args.reexport)
    print(f"kgate ncu-export: {len(written)} CSV files and PROVENANCE.json in {args.out} (from {path})")
    return 0
