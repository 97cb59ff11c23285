"""Epochs: the campaign's contract is fixed at the first freeze.

Method: the *contract* is everything that judges a candidate: the target and
its baseline (not the clone's path), the gate's test selection and its files
(the gate suite folders, the CPU setup), the fixture (the overlay's content
hash), the frozen set, the dispatch classes, and every threshold and row
(``measure``, ``profile``, ``bench``, ``reference`` and any later judging
section, with the input generator's and the reference's files). Each part
is hashed separately (sha256 over canonical JSON plus file contents); the
contract's digest hashes the parts. The candidate, the hypothesis, the
notes and where the target keeps its caches (``cache``) are not part of it,
nor is a key at its schema default where that default is off (null, false,
empty: ``kgate.campaign.without_off_defaults``), so a kgate that adds such a
key keeps every existing contract; a default that is on (a threshold) is
hashed, so a kgate that changes one changes the contract.

The ledger ``results/<campaign>/epochs.json`` (schema kgate.epochs/1) lists
the epochs. ``check`` compares the current contract with the latest epoch:
equal, fine; no ledger yet, epoch 1 opens; different before that epoch was
frozen (no fixture_freeze passed yet), the epoch takes the new contract;
different after a freeze, kgate refuses to run unless the explicit switch
``new_epoch=true`` is given, which opens epoch n+1 and first copies the
records of the results tree (record.json, verdict.json, manifest.json and
candidate patches) to ``results/<campaign>/_epochs/<n>/``. ``check`` only
reads: the DAG build calls it, so a refusal comes before any job, and a dry
run or lint writes nothing. ``open_or_check`` checks again and writes what
``check`` found; the workflow calls it once, when Snakemake starts running
jobs (``kgate.workflow.open_epoch``). Every stage checks the ledger again
before it runs (``current``) and stamps its record with the epoch number and
the contract digest, so the report can say which result belongs to which
epoch; fixture_freeze marks the epoch frozen (``mark_frozen``).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kgate import paths
from kgate.campaign import Campaign, schema, without_off_defaults
from kgate.errors import ConfigError, ProvenanceMismatch
from kgate.records import read_versioned, write_json
from kgate.source import overlay

LEDGER_SCHEMA = "kgate.epochs/1"
# top-level campaign keys that are not part of the contract
NOT_CONTRACT = frozenset({"schema", "name", "hypothesis", "notes", "candidate", "cache"})
ARCHIVED = ("record.json", "verdict.json", "manifest.json", "candidate.patch")


@dataclass(frozen=True, slots=True)
class Contract:
    """The hashed contract: one sha256 (16 hex) per part, and their digest."""

    digest: str
    parts: dict[str, str]


def _h(*chunks: bytes) -> str:
    h = hashlib.sha256()
    for c in chunks:
        h.update(c)
        h.update(b"\0")
    return h.hexdigest()[:16]


def _json(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, default=str).encode()


def _files(path: Path) -> list[bytes]:
    """Relative names and contents of a file or of every file below a folder (caches skipped)."""
    if path.is_file():
        return [path.name.encode(), path.read_bytes()]
    out = []
    for f in sorted(p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        out += [str(f.relative_to(path)).encode(), f.read_bytes()]
    return out


def contract(c: Campaign) -> Contract:
    """Hash the campaign's contract (see the module docstring)."""
    d = without_off_defaults(c.data, schema("campaign"))
    target = json.loads(json.dumps(d["target"]))
    target.get("repo", {}).pop("path", None)
    suites = [paths.PROJECT / s for s in (target.get("pypi") or {}).get("gate_suite") or []]
    gate = d["gate"]
    gate_files = [b for s in suites for b in _files(s)]
    if gate.get("cpu_setup"):
        gate_files += _files(paths.PROJECT / gate["cpu_setup"])
    parts = {
        "target": _h(_json(target)),
        "gate": _h(_json(gate), *gate_files),
        "fixture": _h(_json(d["fixture"]), overlay.content_hash(d["fixture"]["overlay"], c.target_identity).encode()),
        "frozen": _h(_json(d["frozen"])),
    }
    rest = {k: v for k, v in d.items() if k not in NOT_CONTRACT and k not in ("target", "gate", "fixture", "frozen")}
    extra: list[bytes] = []
    inputs = (d.get("measure") or {}).get("inputs")
    if inputs and (paths.PROJECT / inputs).is_file():
        extra = _files(paths.PROJECT / inputs)
    ref_file = ((d.get("reference") or {}).get("callable") or "").rpartition(":")[0]
    if ref_file and (paths.PROJECT / ref_file).is_file():
        # the reference judges the candidate's numbers: its code is part of the contract
        extra += _files(paths.PROJECT / ref_file)
    parts["thresholds"] = _h(_json(rest), *extra)
    return Contract(digest=_h(_json(parts)), parts=parts)


def read(campaign: str) -> dict[str, Any] | None:
    """The ledger, or None when no run of this campaign has built its DAG here yet."""
    p = paths.epochs_ledger(campaign)
    if not p.exists():
        return None
    return read_versioned(p, LEDGER_SCHEMA, "epoch ledger")


def _utc() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _changed(old: dict[str, str], new: dict[str, str]) -> list[str]:
    return sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))


@dataclass(frozen=True, slots=True)
class Opening:
    """What opening the ledger for the current contract does; ``check`` computes it without writing.

    ``action`` is ``unchanged`` (the latest epoch holds the contract),
    ``first run`` (no ledger yet), ``changed before freeze`` (the unfrozen
    epoch takes the new contract) or ``new epoch`` (``new_epoch=true`` after a
    freeze). ``ledger`` is the ledger to write (None: nothing to write) and
    ``archive`` the epoch whose records are copied first (None: none).
    """

    action: str
    epoch: dict[str, Any]
    ledger: dict[str, Any] | None
    archive: int | None


def check(c: Campaign, new_epoch: bool) -> Opening:
    """At DAG build, read-only: what opening the ledger would do, as the module docstring says.
    Raises ConfigError (one line) when the contract changed after a freeze without the switch."""
    cur = contract(c)
    ledger = read(c.name)
    if ledger is None:
        ledger = _first_ledger(c, cur)
        return Opening("first run", ledger["epochs"][-1], ledger, None)
    last = ledger["epochs"][-1]
    if last["contract"] == cur.digest:
        return Opening("unchanged", last, None, None)
    changed = _changed(last["parts"], cur.parts)
    if not last["frozen"]:
        last.update(contract=cur.digest, parts=cur.parts, updated_utc=_utc())
        last.setdefault("changed_before_freeze", []).append(changed)
        return Opening("changed before freeze", last, ledger, None)
    if not new_epoch:
        raise ConfigError(
            f"campaign {c.name}: the contract changed since epoch {last['number']} was frozen "
            f"(changed: {', '.join(changed)}); results of epoch {last['number']} were judged against it. "
            f"Restore it, or start epoch {last['number'] + 1} with --config new_epoch=true")
    entry = _entry(last["number"] + 1, cur, "new_epoch switch", changed)
    ledger["epochs"].append(entry)
    return Opening("new epoch", entry, ledger, last["number"])


def open_or_check(c: Campaign, new_epoch: bool) -> dict[str, Any]:
    """When jobs are about to run: ``check``, then do what it found (archive the closed epoch's records,
    write the ledger); returns the current epoch. Raises ConfigError as ``check`` does."""
    opening = check(c, new_epoch)
    if opening.archive is not None:
        archive(c.name, opening.archive)
    if opening.ledger is not None:
        write_json(paths.epochs_ledger(c.name), opening.ledger)
    return opening.epoch


def _first_ledger(c: Campaign, cur: Contract) -> dict[str, Any]:
    return {"schema": LEDGER_SCHEMA, "campaign": c.name, "epochs": [_entry(1, cur, "first run", [])]}


def _entry(number: int, cur: Contract, reason: str, changed: list[str]) -> dict[str, Any]:
    return {"number": number, "contract": cur.digest, "parts": cur.parts, "opened_utc": _utc(), "reason": reason,
            "changed": changed, "frozen": {}}


def archive(campaign: str, number: int) -> Path:
    """Copy the campaign's records (not caches or raw profiles) to results/<campaign>/_epochs/<number>/."""
    root = paths.campaign_results(campaign)
    dest = paths.epoch_archive(campaign, number)
    for f in sorted(root.rglob("*")):
        rel = f.relative_to(root)
        if not f.is_file() or f.name not in ARCHIVED or f.is_relative_to(dest.parent):
            continue
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(f, dest / rel)
    return dest


def current(c: Campaign) -> dict[str, Any] | None:
    """For a stage: the latest epoch, which must hold the current contract (None without a ledger)."""
    ledger = read(c.name)
    if ledger is None:
        return None
    last = ledger["epochs"][-1]
    cur = contract(c)
    if last["contract"] != cur.digest:
        raise ProvenanceMismatch(
            f"campaign {c.name}: the contract differs from epoch {last['number']}'s "
            f"(changed: {', '.join(_changed(last['parts'], cur.parts))}); this stage does not run in a changed "
            f"contract: rebuild the DAG (snakemake refuses without new_epoch=true)")
    return last


def mark_frozen(c: Campaign, gpu: str, bench_base: str) -> None:
    """fixture_freeze passed on ``gpu``: the current epoch is frozen from now on."""
    ledger = read(c.name)
    if ledger is None:
        ledger = _first_ledger(c, contract(c))
    ledger["epochs"][-1]["frozen"][gpu] = {"bench_base": bench_base, "utc": _utc()}
    write_json(paths.epochs_ledger(c.name), ledger)
