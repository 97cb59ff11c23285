"""Epochs: after a freeze the contract cannot change without the explicit new-epoch switch.

A real campaign (the second-op one, cheap on CPU) is frozen, then its fixture
is edited (a case removed, as someone narrowing the gate would): kgate refuses
to build the DAG, and nothing measured changes. With new_epoch=true the new
epoch opens, the old epoch's records are kept, and every record names its epoch.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest
import yaml
from conftest import REPO, Workflow

from kgate import campaign as campaign_mod
from kgate import epochs

CAMPAIGN = "chunk-local-cumsum-identity"
FREEZE = f"results/{CAMPAIGN}/cpu/fixture_freeze/record.json"


def _edited_campaign(tmp_path: Path, **changes: object) -> Path:
    data = yaml.safe_load(campaign_mod.resolve_campaign_path(CAMPAIGN).read_text())
    for dotted, value in changes.items():
        node = data
        *head, last = dotted.split("__")
        for k in head:
            node = node[k]
        node[last] = value
    path = tmp_path / "edited" / f"{CAMPAIGN}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data))
    return path


def _fewer_cases_fixture(tmp_path: Path) -> str:
    """The campaign's BF16 fixture edited after its freeze: its packed case removed."""
    src = REPO / "kernels/chunk_local_cumsum_identity/fixture"
    dest = tmp_path / "fixture-fewer-cases"
    shutil.copytree(src, dest)
    test = dest / "test_chunk_local_cumsum_oracle_bf16.py"
    text = test.read_text()
    packed = '    varlen("tiny", (0, 17, 81, 128), H=2, dtype=torch.bfloat16, chunk_size=32, scale=0.5),\n'
    assert packed in text
    test.write_text(text.replace(packed, ""))
    return str(dest)


def test_contract_parts_name_what_changed(tmp_path: Path) -> None:
    base = epochs.contract(campaign_mod.load(CAMPAIGN))
    fixture = epochs.contract(campaign_mod.load(_edited_campaign(
        tmp_path, fixture__overlay=_fewer_cases_fixture(tmp_path))))
    assert [k for k in base.parts if base.parts[k] != fixture.parts[k]] == ["fixture"]
    selection = epochs.contract(campaign_mod.load(_edited_campaign(tmp_path, gate__select={"cpu": "tiny and not varlen"})))
    assert [k for k in base.parts if base.parts[k] != selection.parts[k]] == ["gate"]
    # the candidate is what is judged, not part of the contract
    cand = epochs.contract(campaign_mod.load(CAMPAIGN, {"candidate": "overlay:kernels/rwkv6_bwd_fused/identity"}))
    assert cand == base


def test_a_key_at_an_off_default_is_outside_the_contract(tmp_path: Path) -> None:
    """A kgate that adds a key whose default is off (here gate.restore_env: []) keeps every frozen contract, as
    does a campaign writing that default out; setting it, or changing a default that is on, changes the part."""
    c = campaign_mod.load(CAMPAIGN)
    base = epochs.contract(c)
    assert c.data["gate"]["restore_env"] == [] and c.data["gate"]["env"] == {}
    older = json.loads(json.dumps(c.data))          # as a kgate without the key loaded it
    del older["gate"]["restore_env"]
    assert epochs.contract(dataclasses.replace(c, data=older)) == base
    written = epochs.contract(campaign_mod.load(_edited_campaign(tmp_path, gate__restore_env=[], gate__env={})))
    assert written == base
    on = epochs.contract(campaign_mod.load(_edited_campaign(tmp_path, gate__restore_env=["FLA_USE_TMA"])))
    assert [k for k in base.parts if base.parts[k] != on.parts[k]] == ["gate"]
    bar = json.loads(json.dumps(c.data))
    bar["bench"]["resolution"] = bar["bench"]["resolution"] + 0.01
    assert epochs.contract(dataclasses.replace(c, data=bar)).parts["thresholds"] != base.parts["thresholds"]


@pytest.mark.campaign
def test_fixture_edited_after_freeze_needs_a_new_epoch(tmp_path: Path) -> None:
    wf = Workflow(tmp_path / "wd")
    proc = wf.run(f"campaign={CAMPAIGN}", args=(FREEZE,))
    assert proc.returncode == 0, proc.stderr[-3000:]
    ledger_file = wf.workdir / "results" / CAMPAIGN / "epochs.json"
    ledger = json.loads(ledger_file.read_text())
    assert [e["number"] for e in ledger["epochs"]] == [1]
    assert "cpu" in ledger["epochs"][0]["frozen"]
    fixture_file = wf.workdir / "results" / CAMPAIGN / "cpu" / "fixture_freeze" / "record.json"
    frozen_record = fixture_file.read_bytes()
    assert json.loads(frozen_record)["epoch"]["number"] == 1

    edited = _edited_campaign(tmp_path, fixture__overlay=_fewer_cases_fixture(tmp_path))
    refused = wf.run(f"campaign={edited}", args=(FREEZE,))
    assert refused.returncode != 0
    err = refused.stdout + refused.stderr
    assert "contract changed since epoch 1 was frozen (changed: fixture)" in err, err[-2000:]
    assert "new_epoch=true" in err
    assert fixture_file.read_bytes() == frozen_record, "a refused run must not touch what was measured"
    assert json.loads(ledger_file.read_text()) == ledger

    opened = wf.run(f"campaign={edited}", "new_epoch=true", args=(FREEZE,))
    assert opened.returncode == 0, opened.stderr[-3000:]
    ledger = json.loads(ledger_file.read_text())
    assert [(e["number"], e["reason"], e["changed"]) for e in ledger["epochs"]] == [
        (1, "first run", []), (2, "new_epoch switch", ["fixture"])]
    assert "cpu" in ledger["epochs"][1]["frozen"]
    new = json.loads(fixture_file.read_text())
    assert new["epoch"]["number"] == 2
    assert new["data"]["fixture_passed"] < json.loads(frozen_record)["data"]["fixture_passed"]
    kept = wf.workdir / "results" / CAMPAIGN / "_epochs" / "1" / "cpu" / "fixture_freeze" / "record.json"
    assert kept.read_bytes() == frozen_record, "epoch 1's records are kept"

    # going back to the original contract is a change too
    back = wf.run(f"campaign={CAMPAIGN}", args=(FREEZE, "-n"))
    assert back.returncode != 0
    assert "since epoch 2 was frozen (changed: fixture)" in back.stdout + back.stderr


def test_report_lists_every_epoch_and_its_records() -> None:
    from kgate.report.page import epoch_rows

    ledger = {"epochs": [
        {"number": 1, "reason": "first run", "changed": [], "opened_utc": "t1", "contract": "aa",
         "frozen": {"cpu": {"bench_base": "b" * 40}}},
        {"number": 2, "reason": "new_epoch switch", "changed": ["fixture"], "opened_utc": "t2", "contract": "bb",
         "frozen": {}}]}
    records = [{"stage": "target", "epoch": {"number": 1}}, {"stage": "fixture_freeze", "epoch": {"number": 2}},
               {"stage": "candidate_build", "epoch": None}]
    rows = epoch_rows(ledger, records)
    assert [(r["number"], r["changed"], r["stages"]) for r in rows] == [("1", "-", "target"),
                                                                        ("2", "fixture", "fixture_freeze")]
    assert rows[0]["frozen"] == "cpu (BENCH_BASE bbbbbbbbbbbb)" and rows[1]["frozen"] == "not frozen yet"
