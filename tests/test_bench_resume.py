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
from kgate.gates.bench import replication
from kgate.measure import checkpoints

DRIVER = '''\
import json, sys
from pathlib import Path
from kgate import stats
from kgate.stages import bench
from kgate.measure import telemetry as measure
from kgate.measure.arms import Arm, Deadline
from kgate.measure.replicas import WorkerPairs
from kgate.measure.rows import Row

wt, root, ckpt = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
env, init = json.loads(sys.argv[4]), json.loads(sys.argv[5])
every = json.loads(sys.argv[6])
row = Row("r1", "dense", {"name": "r1", "N": 4, "D": 8})
plan = bench.Plan([("r1:fwd", row, "fwd", "gated")])


def start():
    arms = {n: Arm(n, wt, root / f"cache-{n}", env, root / f"{n}.log", Deadline(600)) for n in ("base", "cand")}
    for a in arms.values():
        a.info = a.request("init", **init)
    return arms


arms = start()
hashes = {"r1": arms["base"].request("prepare", rows=[row.values])["r1"]}
arms["cand"].request("prepare", rows=[row.values])
for a in arms.values():
    a.request("warm", row="r1", mode="fwd", calls=1)
device = arms["base"].info["device"]
pairs = WorkerPairs(arms, every, start, lambda new: bench.ready_pair(new, arms, device, plan, hashes, 1, []))
ctl = stats.ControllerConfig(min_rounds=5, max_rounds=5)
parts = {"test": "resume", "rows": ["r1:fwd"], "rounds_per_worker_pair": every}
try:
    recorded, dec, resumed, note = bench.run_rounds(pairs, plan, 1, measure.Telemetry(None, True), ctl, ckpt, parts)
finally:
    pairs.close()
print(json.dumps({"rounds": len(recorded), "valid": dec.valid_rounds, "excluded": len(dec.excluded),
                  "resumed_from": resumed, "note": note,
                  "class": dec.rows["r1:fwd"].classification, "history": pairs.history}))
'''


def round_lines(path: Path) -> list[str]:
    if not path.exists():
        return []
    return [line for line in path.read_text().splitlines() if '"kind": "round"' in line]


@pytest.mark.parametrize("every", [None, 2])
def test_a_killed_bench_resumes_at_its_last_round(tmp_path: Path, every: int | None) -> None:
    """Kill the coordinator after k rounds; the rerun keeps those k rounds untouched and runs only the rest. With
    worker pairs replicated every 2 rounds, each pair times at most 2 consecutive rounds, every pair is a fresh pair
    of processes, and the resumed run's pairs are numbered after the killed run's; another replication setting is
    another setup (its rounds are set aside, never mixed in)."""
    wt, inputs = toy_worktree(tmp_path)
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    ckpt = tmp_path / "out" / "rounds.jsonl"
    env = toy_env(wt, tmp_path / "cache", TOYOP_SLEEP="0.25")
    args = [sys.executable, str(driver), str(wt), str(tmp_path), str(ckpt), json.dumps(env), json.dumps(toy_init(inputs)),
            json.dumps(every)]
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
    # the cap counts valid rounds: a round screened out as an outlier (timing noise of the 2-core host) is replaced
    n = out["rounds"]
    assert out["valid"] == 5 and n == 5 + out["excluded"], out
    assert out["note"] == f"resumed after {k} recorded round(s)"
    after = round_lines(ckpt)
    assert after[:k] == kept, "recorded rounds must be kept byte for byte"
    rounds = [json.loads(x) for x in after]
    assert [r["index"] for r in rounds] == list(range(n))
    assert [r["order"] for r in rounds] == ["AB", "BA"] * (n // 2) + ["AB"] * (n % 2)
    pair = [r["pair"] for r in rounds]
    pids = {r["pair"]: tuple(sorted(r["pids"].values())) for r in rounds}
    assert all(len(set(ps)) == 2 for ps in pids.values())
    assert len({p for ps in pids.values() for p in ps}) == 2 * len(pids), "every pair is a fresh pair of processes"
    assert pair == sorted(pair) and pair[k] > pair[k - 1], "the resumed run's pairs come after the killed run's"
    history = out["history"]
    assert [h["pair"] for h in history] == sorted(set(pair[k:]))
    if every is None:
        assert pair == [0] * k + [1] * (n - k) and len(history) == 1
    else:
        assert all(pair.count(p) <= every for p in set(pair))
        assert all(h["ready_s"] > 0 for h in history[1:]) and len(history) == len(range(k, n, every))
        # where a fresh pair's seconds went: its phases, each measured, together within its ready time
        # (each worker's own init phases, ``start.<arm>.*``, are parts of ``start``)
        top = [{k: v for k, v in h["phases_s"].items() if "." not in k} for h in history[1:]]
        assert all(set(t) == {"start", "prepare", "warm"} and min(t.values()) > 0
                   and sum(t.values()) <= h["ready_s"] + 0.01 for t, h in zip(top, history[1:], strict=True))
        assert all(h["phases_s"][f"start.{arm}.total"] <= h["phases_s"]["start"] + 0.01
                   for h in history[1:] for arm in ("base", "cand"))
    # each round's line carries its pair's start-up seconds, so the record of the resumed run keeps the killed
    # run's pairs' too: none for each run's first pair (started before any round), measured for every other
    firsts = {pair[0], pair[k]}
    assert all((r["pair_ready_s"] is None) == (r["pair"] in firsts) for r in rounds), [r["pair_ready_s"] for r in rounds]
    rep = replication(rounds, every)
    assert [p["pair"] for p in rep["pairs"]] == sorted(set(pair))
    for p in rep["pairs"]:
        mine = [r for r in rounds if r["pair"] == p["pair"]]
        assert p["ready_s"] == mine[0]["pair_ready_s"] and p["phases_s"] == mine[0]["pair_phases_s"], p
        assert (p["ready_s"] is None) == (p["pair"] in firsts), p
    third = subprocess.run(args, env=run_env, capture_output=True, text=True, timeout=300)
    assert json.loads(third.stdout.strip().splitlines()[-1])["resumed_from"] == n, "a finished bench runs no round"
    if every is not None:
        other = subprocess.run(args[:-1] + ["null"], env=run_env, capture_output=True, text=True, timeout=300)
        res = json.loads(other.stdout.strip().splitlines()[-1])
        assert res["resumed_from"] == 0 and "another setup" in res["note"]


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
