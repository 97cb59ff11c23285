"""``snakemake -n`` and ``--lint`` write nothing; a changed contract is still refused when the DAG is built.

Real Snakemake, the default campaign, the local profile, a scratch workdir:
every file and folder under the workdir (but Snakemake's own ``.snakemake/``
and the helper's log) and under the repository's results/, work/, logs/ and
reports/ is the same, byte for byte and by mtime, before and after. The dry
runs start from no ledger (the first run would open epoch 1), from an
unfrozen epoch of another contract (a run would update it) and from a frozen
one with ``new_epoch=true`` (a run would archive the records and open epoch
2): each a write at DAG build before the ledger moved to the workflow's
onstart handler. Each dry run builds the DAG only (about two seconds).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import yaml
from conftest import REPO, Workflow

from kgate import campaign as campaign_mod
from kgate import epochs

CAMPAIGN = yaml.safe_load((REPO / "config" / "config.yaml").read_text())["campaign"]
REPO_TREES = ("results", "work", "logs", "reports")
# Snakemake's own state (its IO cache, lint's log file) and the test helper's copy of the output
NOT_KGATES = (".snakemake", "last-snakemake.log")


def _tree(root: Path, skip: tuple[str, ...] = ()) -> dict[str, tuple[int, int, str] | str]:
    """Every file (size, mtime in ns, sha256) and folder below ``root``, by relative path."""
    out: dict[str, tuple[int, int, str] | str] = {}
    if not root.exists():
        return out
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root)
        if rel.parts[0] in skip:
            continue
        if p.is_dir():
            out[str(rel)] = "folder"
        else:
            st = p.stat()
            out[str(rel)] = (st.st_size, st.st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
    return out


def _snapshot(wf: Workflow) -> dict[str, dict[str, tuple[int, int, str] | str]]:
    snap = {"workdir": _tree(wf.workdir, NOT_KGATES)}
    for name in REPO_TREES:
        snap[name] = _tree(REPO / name)
    return snap


def _ledger(wf: Workflow, *, frozen: bool) -> Path:
    """A ledger whose latest epoch holds another fixture than the campaign's, frozen or not, and one record."""
    cur = epochs.contract(campaign_mod.load(CAMPAIGN))
    parts = dict(cur.parts, fixture="0" * 16)
    entry = {"number": 1, "contract": "1" * 16, "parts": parts, "opened_utc": "2026-01-01T00:00:00Z",
             "reason": "first run", "changed": [],
             "frozen": {"cpu": {"bench_base": "b" * 40, "utc": "2026-01-01T00:00:00Z"}} if frozen else {}}
    path = wf.workdir / "results" / CAMPAIGN / "epochs.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"schema": epochs.LEDGER_SCHEMA, "campaign": CAMPAIGN, "epochs": [entry]}))
    record = wf.workdir / "results" / CAMPAIGN / "cpu" / "fixture_freeze" / "record.json"
    record.parent.mkdir(parents=True)
    record.write_text('{"schema": "kgate.stage/1"}\n')
    return path


def _dry_run(wf: Workflow, *config: str) -> str:
    before = _snapshot(wf)
    proc = wf.run(*config, args=("-n",), timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "This was a dry-run" in out and "doctor" in out, out[-3000:]
    assert _snapshot(wf) == before, "a dry run wrote into the tree"
    return out


def test_dry_run_and_lint_write_nothing(tmp_path: Path) -> None:
    wf = Workflow(tmp_path / "wd")
    wf.workdir.mkdir()
    _dry_run(wf)
    assert not (wf.workdir / "results").exists()

    before = _snapshot(wf)
    lint = wf.run(args=("--lint",), timeout=300)
    out = lint.stdout + lint.stderr
    # lint exits 1 when it prints lints (no conda env per rule); the Snakefile was parsed and the campaign resolved
    assert lint.returncode in (0, 1) and "Lints for rule doctor" in out and "kgate: error" not in out, out[-3000:]
    assert _snapshot(wf) == before, "--lint wrote into the tree"


@pytest.mark.parametrize("frozen", [False, True], ids=["before-freeze", "new-epoch"])
def test_dry_run_leaves_the_ledger_as_it_is(tmp_path: Path, frozen: bool) -> None:
    wf = Workflow(tmp_path / "wd")
    ledger = _ledger(wf, frozen=frozen)
    text = ledger.read_text()
    _dry_run(wf, *(["new_epoch=true"] if frozen else []))
    assert ledger.read_text() == text
    assert not (wf.workdir / "results" / CAMPAIGN / "_epochs").exists(), "nothing was archived"


def test_changed_contract_after_freeze_is_refused_at_dag_build(tmp_path: Path) -> None:
    wf = Workflow(tmp_path / "wd")
    _ledger(wf, frozen=True)
    before = _snapshot(wf)
    proc = wf.run(args=("-n",), timeout=300)
    err = proc.stdout + proc.stderr
    assert proc.returncode != 0
    line = next(ln for ln in err.splitlines() if ln.startswith("kgate: error:"))
    assert "contract changed since epoch 1 was frozen (changed: fixture)" in line and "new_epoch=true" in line
    assert _snapshot(wf) == before
