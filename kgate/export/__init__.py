"""``python -m kgate export``: a bench or model record's samples in formats other tools read (docs/export.md).

Usage::

    python -m kgate export --format pyperf results/C/h200/bench/<cand>/record.json
    python -m kgate export --format nvbench results/C/h200/bench/<cand>/record.json --out bench.json
    python -m kgate export --format pyperf --arm base REC --out base.json   # then: pyperf compare_to base.json cand.json

    from kgate import export
    written = export.write(Path("results/C/h200/bench/<cand>/record.json"), "nvbench", Path("out/bench.json"))

``kgate.export.samples`` reads the samples (a bench record's ``rounds.jsonl``
beside it, a model record's blocks); ``pyperf_json`` and ``nvbench_json``
lay them out. This is a layer below the stages: it reads records through
``kgate.records`` and paths through ``kgate.paths`` and imports no stage.

Files are written with ``kgate.records``' atomic writers (the user's umask,
fsynced, renamed into place). The default output lies beside the record:
``<stage>.<format>.json`` (``<stage>.<arm>.<format>.json`` for one arm);
NVBench's sample-times files go in ``<json name>-bin/`` beside the JSON,
written before the JSON that names them. Bad input (not a bench or model
record, no samples file, samples that do not match the record) is one line
naming the file (``ExportError``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from kgate.export import nvbench_json, pyperf_json
from kgate.export.samples import ARMS, EXPORT_SCHEMA, ExportError, Samples, load
from kgate.records import atomic_write_bytes, atomic_write_text

FORMATS = ("nvbench", "pyperf")

__all__ = ["EXPORT_SCHEMA", "FORMATS", "ExportError", "Samples", "default_out", "load", "write"]


def default_out(record_path: Path, stage: str, fmt: str, arm: str | None = None) -> Path:
    """``<record folder>/<stage>[.<arm>].<format>.json``."""
    return Path(record_path).parent / f"{stage}{'.' + arm if arm else ''}.{fmt}.json"


def write(record_path: Path, fmt: str, out: Path | None = None, *, arm: str | None = None) -> list[Path]:
    """Export the record at ``record_path`` as ``fmt`` (``nvbench`` or ``pyperf``) to ``out``; the paths written.

    ``arm`` (``base`` or ``cand``) writes that arm alone, its benchmarks named by row only (see the format modules).
    """
    if fmt not in FORMATS:
        raise ExportError(f"unknown export format {fmt!r}: one of {', '.join(FORMATS)}")
    if arm is not None and arm not in ARMS:
        raise ExportError(f"unknown arm {arm!r}: one of {', '.join(ARMS)}")
    samples = load(record_path)
    arms = (arm,) if arm else ARMS
    out = Path(out) if out is not None else default_out(record_path, samples.stage, fmt, arm)
    if out.is_dir():
        raise ExportError(f"{out}: is a folder; --out names the JSON file to write")
    if fmt == "pyperf":
        atomic_write_text(out, json.dumps(pyperf_json.document(samples, arms=arms), sort_keys=True) + "\n")
        return [out]
    root, files = nvbench_json.document(samples, out.name, arms=arms)
    written = []
    for rel, data in files:
        atomic_write_bytes(out.parent / rel, data)
        written.append(out.parent / rel)
    atomic_write_text(out, json.dumps(root, indent=2) + "\n")
    return [out, *written]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("record", help="a bench or model record.json (a bench record's rounds.jsonl must lie beside it)")
    p.add_argument("--format", required=True, choices=FORMATS, help="nvbench: NVBench JSON + sample-times files; "
                   "pyperf: a pyperf JSON suite")
    p.add_argument("--out", default=None, help="the JSON file to write (default: beside the record, "
                   "<stage>[.<arm>].<format>.json)")
    p.add_argument("--arm", default=None, choices=ARMS, help="write one arm only, benchmarks named by row, so two "
                   "files (base, cand) pair up in nvbench-compare-robust or pyperf compare_to (default: both arms)")


def run_cli(args: argparse.Namespace) -> int:
    written = write(Path(args.record), args.format, Path(args.out) if args.out else None, arm=args.arm)
    label = {"pyperf": pyperf_json.FORMAT, "nvbench": nvbench_json.FORMAT}[args.format]
    extra = f" and {len(written) - 1} sample-times file(s) in {written[1].parent}" if len(written) > 1 else ""
    print(f"kgate export: wrote {label} to {written[0]}{extra}")
    return 0
