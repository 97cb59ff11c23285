"""bench's rounds checkpoint: a killed benchmark resumes at its last finished round.

The driver below is the real round loop (``kgate.stages.bench.run_rounds``) with two
real workers on the toy target of tests/test_worker.py; only the stage around
it (campaign, records, worktrees) is left out.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO
from test_worker import toy_env, toy_init, toy_worktree

from kgate.errors import KgateError
from kgate.measure import checkpoints

DRIVER = '''\
import json, sys
from pathlib import Path
from kgate import stats
from kgate.stages import bench
from kgate.measure import telemetry as measure
from kgate.measure.arms import Arm, Deadline
from kgate.measure.rows import Row

wt, root, ckpt = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
env, init = json.loads(sys.argv[4]), json.loads(sys.argv[5])
arms = {n: Arm(n, wt, root / f"cache-{n}", env, root / f"{n}.log", Deadline(600)) for n in ("base", "cand")}
for a in arms.values():
    a.info = a.request("init", **init)
row = Row("r1", "dense", {"name": "r1", "N": 4, "D": 8})
plan = bench.Plan([("r1:fwd", row, "fwd", "gated")])
for a in arms.values():
    a.request("prepare", rows=[row.values])
    a.request("warm", row="r1", mode="fwd", calls=1)
ctl = stats.ControllerConfig(min_rounds=5, max_rounds=5)
parts = {"test": "resume", "rows": ["r1:fwd"]}
recorded, decisions, resumed, note = bench.run_rounds(arms, plan, 1, measure.Telemetry(None, True), ctl, ckpt, parts, set())
print(json.dumps({"rounds": len(recorded), "resumed_from": resumed, "note": note,
                  "class": decisions["r1:fwd"].classification}))
for a in arms.values():
    a.close()
'''


def round_lines(path: Path) -> list[str]:
    if not path.exists():
        return []
    return [line for line in path.read_text().splitlines() if '"kind": "round"' in line]


def test_a_killed_bench_resumes_at_its_last_round(tmp_path: Path) -> None:
    """Kill the coordinator after k rounds; the rerun keeps those k rounds untouched and runs only the rest."""
    wt, inputs = toy_worktree(tmp_path)
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    ckpt = tmp_path / "out" / "rounds.jsonl"
    env = toy_env(wt, tmp_path / "cache", TOYOP_SLEEP="0.25")
    args = [sys.executable, str(driver), str(wt), str(tmp_path), str(ckpt), json.dumps(env), json.dumps(toy_init(inputs))]
    run_env = dict(os.environ, PYTHONPATH=str(REPO))
    first = subprocess.Popen(args, env=run_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True)
    deadline = time.time() + 240
    while len(round_lines(ckpt)) < 2:
        assert first.poll() is None, first.stderr.read() if first.stderr else ""
        assert time.time() < deadline, "no 2 rounds within 240 s"
        time.sleep(0.02)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    kept = round_lines(ckpt)
    k = len(kept)
    assert 2 <= k < 5, k
    second = subprocess.run(args, env=run_env, capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stderr[-2000:]
    out = json.loads(second.stdout.strip().splitlines()[-1])
    assert out["resumed_from"] == k
    assert out["rounds"] == 5
    assert out["note"] == f"resumed after {k} recorded round(s)"
    after = round_lines(ckpt)
    assert after[:k] == kept, "recorded rounds must be kept byte for byte"
    assert [json.loads(x)["index"] for x in after] == [0, 1, 2, 3, 4]
    assert [json.loads(x)["order"] for x in after] == ["AB", "BA", "AB", "BA", "AB"]
    third = subprocess.run(args, env=run_env, capture_output=True, text=True, timeout=300)
    assert json.loads(third.stdout.strip().splitlines()[-1])["resumed_from"] == 5, "a finished bench runs no round"


class TestLoadCheckpoint:
    def write(self, path: Path, key: str, rounds: int, tail: str = "") -> None:
        lines = [json.dumps({"kind": "header", "key": key})]
        lines += [json.dumps({"kind": "round", "index": i, "order": "AB", "rows": {}}) for i in range(rounds)]
        path.write_text("\n".join(lines) + "\n" + tail)

    def test_a_torn_last_line_is_dropped(self, tmp_path: Path) -> None:
        """A round cut off by the kill is not a round; the file is rewritten without it."""
        p = tmp_path / "rounds.jsonl"
        self.write(p, "k1", 3, tail='{"kind": "round", "index": 3, "ord')
        rounds, note = checkpoints.load_checkpoint(p, "k1")
        assert [r["index"] for r in rounds] == [0, 1, 2]
        assert note == "resumed after 3 recorded round(s)"
        assert len(p.read_text().splitlines()) == 4

    def test_rounds_of_another_setup_are_set_aside(self, tmp_path: Path) -> None:
        """Other commits, rows, inputs or device: the old rounds are renamed, never mixed in."""
        p = tmp_path / "rounds.jsonl"
        self.write(p, "old", 2)
        rounds, note = checkpoints.load_checkpoint(p, "new")
        assert rounds == [] and note is not None and "another setup" in note
        assert not p.exists() and len(list(tmp_path.glob("rounds.stale-*.jsonl"))) == 1

    def test_a_corrupt_middle_line_is_an_error(self, tmp_path: Path) -> None:
        p = tmp_path / "rounds.jsonl"
        p.write_text('{"kind": "header", "key": "k"}\nnot json\n{"kind": "round", "index": 0}\n')
        with pytest.raises(KgateError, match="line 2 is not JSON"):
            checkpoints.load_checkpoint(p, "k")
