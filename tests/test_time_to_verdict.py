"""scripts/time_to_verdict.py's pieces and scripts/render_timing.py, on the files they read and write.

The benchmark itself is a script with a record (it runs whole campaigns, minutes each), never a test;
these check what it parses and what the renderer writes, on small inputs made here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))

import render_timing  # noqa: E402
import time_to_verdict  # noqa: E402

from kgate import campaign  # noqa: E402

SNAKEMAKE_LOG = """\
Select jobs to execute...
Execute 1 jobs...
[Wed Dec  2 01:03:40 2026]
localrule doctor:
    output: results/c/cpu/doctor/record.json
    jobid: 3
    resources: tmpdir=/tmp
[Wed Dec  2 01:03:52 2026]
Finished jobid: 3 (Rule: doctor)
[Wed Dec  2 01:03:53 2026]
checkpoint baseline_tests:
    jobid: 5
"""


def test_snakemake_jobs_come_from_its_log(tmp_path: Path) -> None:
    (tmp_path / "x.snakemake.log").write_text(SNAKEMAKE_LOG)
    since = time.mktime(time.strptime("Wed Dec  2 01:03:00 2026", "%a %b %d %H:%M:%S %Y"))
    jobs = time_to_verdict.snakemake_jobs(tmp_path, since)
    assert [(j["rule"], j["jobid"], j.get("wall_s")) for j in jobs] == [("doctor", 3, 12.0), ("baseline_tests", 5, None)]
    assert jobs[1]["finished"] is None  # cut: started, never finished
    assert time_to_verdict.snakemake_jobs(tmp_path, since + 3600) == []


def test_the_profile_copy_sets_the_scenarios_kernel_cache(tmp_path: Path) -> None:
    prof = time_to_verdict.profile_copy(REPO / "profiles" / "local", tmp_path / "p", tmp_path / "k")
    text = (prof / "config.yaml").read_text()
    assert f"  - kernel_cache='{(tmp_path / 'k').resolve()}'" in text and "work/cache/kernels" not in text
    assert text.replace(f"'{(tmp_path / 'k').resolve()}'", "'work/cache/kernels'") == \
        (REPO / "profiles" / "local" / "config.yaml").read_text()


def test_the_edit_changes_the_candidate_id_but_not_its_code_lines(tmp_path: Path) -> None:
    camp = campaign.load("chunk-local-cumsum-identity")
    src = time_to_verdict.edited_candidate(camp, tmp_path / "edited")
    from kgate.source import candidate

    edited = campaign.load("chunk-local-cumsum-identity", {"candidate": src})
    assert candidate.identity(edited) != candidate.identity(camp)
    before = (REPO / "kernels/chunk_local_cumsum_identity/candidate/identity_wrapper.py").read_text().rstrip("\n")
    after = (tmp_path / "edited" / "identity_wrapper.py").read_text()
    assert after == before + f"\n{time_to_verdict.EDIT_MARK}\n"


def test_a_ref_candidate_is_edited_in_a_shared_clone_of_the_ref_and_the_users_clone_is_untouched(tmp_path: Path) -> None:
    """The TVD replay's candidate is a ref: the edit is a shared clone of it with the comment appended to its
    diff_paths' Python file, run as a worktree candidate; the target clone keeps its status, refs and worktrees."""
    clone = tmp_path / "clone"
    op = clone / "src" / "liger_kernel" / "ops" / "tvd.py"
    op.parent.mkdir(parents=True)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(clone)]
    subprocess.run(["git", "init", "-q", "-b", "main", str(clone)], check=True)
    op.write_text("def tvd():\n    return 1\n")
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "base"], check=True)
    op.write_text("def tvd():\n    return 2\n")
    subprocess.run([*git, "commit", "-qam", "head"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    subprocess.run([*git, "checkout", "-q", "HEAD~1"], check=True)
    state = [subprocess.run([*git, *a], capture_output=True, text=True).stdout for a in
             (["status", "--porcelain"], ["show-ref"], ["worktree", "list"], ["rev-parse", "HEAD"])]
    camp = campaign.load("liger-tvd-fused-scale-1127", {"target_path": str(clone), "candidate": f"ref:{head}"})
    got = time_to_verdict.edited_candidate(camp, tmp_path / "edited")
    assert got == f"worktree:{(tmp_path / 'edited').resolve()}"
    edited = (tmp_path / "edited" / "src" / "liger_kernel" / "ops" / "tvd.py").read_text()
    assert edited == f"def tvd():\n    return 2\n{time_to_verdict.EDIT_MARK}\n"
    assert [subprocess.run([*git, *a], capture_output=True, text=True).stdout for a in
            (["status", "--porcelain"], ["show-ref"], ["worktree", "list"], ["rev-parse", "HEAD"])] == state
    missing = campaign.load("liger-tvd-fused-scale-1127", {"target_path": str(clone), "candidate": "ref:no-such-ref"})
    with pytest.raises(SystemExit, match=f"no-such-ref is no commit of {clone}"):
        time_to_verdict.edited_candidate(missing, tmp_path / "edited2")


def _record() -> dict:
    """A made-up record (the renderer's input format; no figure here is a measurement)."""
    def stage(name: str, wall: float, state: str) -> dict:
        return {"stage": name, "candidate": None, "status": "pass", "wall_s": wall, "started_utc": "x",
                "finished_utc": "y", "cache_state": state, "cache_added": {}}
    done = {"status": "done", "wall_s": 10.0}
    return {"schema": render_timing.SCHEMA, "campaign": "c", "started_utc": "2026-01-01T00:00:00Z",
            "machine": {"stack": {"gpu": "NVIDIA H200", "driver": "1", "cuda": "12.8", "torch": "2", "triton": "3"},
                        "cores": 16, "gate_workers_auto": 14},
            "scenarios": {
                "cold": {"phases": {"first": {**done, "stages": [stage("baseline_tests", 400, "cold")]},
                                    "forced": {**done, "stages": [stage("bench", 90, "warm")]},
                                    "rerun": {"status": "cut", "wall_s": 130.0, "stages": []}},
                         "totals": {"first_verdict_s": 10.0, "full_forced_verdict_s": 20.0, "rerun_after_edit_s": None}},
                "warm": {"phases": {"first": {**done, "stages": [stage("baseline_tests", 40, "warm")]}},
                         "totals": {"first_verdict_s": 10.0, "full_forced_verdict_s": None, "rerun_after_edit_s": None}}}}


def test_the_renderer_replaces_only_the_marked_block(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n\n- a list item:\n\n  {render_timing.BEGIN}\n  | old | row |\n  {render_timing.END}\n\nafter\n")
    rec = tmp_path / "r.json"
    rec.write_text(json.dumps(_record()))
    p = subprocess.run([sys.executable, str(REPO / "scripts" / "render_timing.py"), str(rec), "--write", str(readme)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    text = readme.read_text()
    assert text.startswith("intro\n\n- a list item:\n\n  <!-- time-to-verdict:begin -->\n  Measured by")
    assert text.endswith("  <!-- time-to-verdict:end -->\n\nafter\n") and "| old | row |" not in text
    assert "  | baseline_tests | 6 min 40 s (cold) | — | 40 s (warm) | — |" in text
    assert "  | rerun after a candidate edit (forced) | cut after 2 min 10 s | not run |" in text
    assert "  | time to the full forced verdict | 20 s | not run |" in text


def test_the_readme_has_the_block_the_renderer_writes() -> None:
    lines = [ln.strip() for ln in (REPO / "README.md").read_text().splitlines()]
    assert lines.count(render_timing.BEGIN) == 1 and lines.count(render_timing.END) == 1
    assert lines.index(render_timing.BEGIN) < lines.index(render_timing.END)


def test_a_record_of_another_kind_is_refused() -> None:
    with pytest.raises(SystemExit, match="not a kgate.time-to-verdict/1 record"):
        render_timing.render({"schema": "kgate.stage/1"})


@pytest.mark.parametrize("entry", ["force=true", "candidate=overlay:x", "target_path", "=x"])
def test_a_set_entry_the_script_owns_or_without_a_value_is_refused_before_any_run(
        tmp_path: Path, entry: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        time_to_verdict.main(["--set", entry, "--base", str(tmp_path / "b"), "--out", str(tmp_path / "r.json")])
    assert f"--set {entry!r}" in capsys.readouterr().err
    assert not (tmp_path / "b").exists() and not (tmp_path / "r.json").exists()


def _args(tmp_path: Path, *extra: str) -> object:
    """The script's own arguments for a seeded scenario under ``tmp_path`` (its parser's defaults otherwise)."""
    return time_to_verdict.parser().parse_args(["--scenarios", "seeded", "--base", str(tmp_path / "b"),
                                               "--out", str(tmp_path / "b" / "r.json"), *extra])


def test_a_given_bundle_seeds_the_seeded_scenario_without_a_cold_run(tmp_path: Path) -> None:
    """A bundle made elsewhere (here: exported by kgate's own CLI from a cache of this stack) is imported into
    the seeded root as it is; nothing is exported from a cold root that does not exist."""
    from kgate.cache import stack as stack_mod
    from kgate.cache.store import KernelCache
    src = KernelCache(tmp_path / "src", stack_mod.detect())
    src.prepare()
    (src.triton / "AAAA").mkdir()
    (src.triton / "AAAA" / "tuned.autotune.json").write_text('{"key": [4096], "configs_timings": []}')
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    made = subprocess.run([sys.executable, "-m", "kgate", "cache", "export", str(tmp_path / "given.tgz"),
                           "--kernel-cache", str(tmp_path / "src")], env=env, capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    (tmp_path / "b").mkdir()
    bench = time_to_verdict.Bench(_args(tmp_path, "--seed-bundle", str(tmp_path / "given.tgz")))
    seed = bench.seed()
    assert seed["given"] and "export" not in seed and seed["import"]["exit_code"] == 0, seed
    assert not (tmp_path / "b" / "kernels-cold").exists()
    seeded = KernelCache(tmp_path / "b" / "kernels-seeded", stack_mod.detect())
    assert seeded.census().autotune == 1 and seeded.state(seeded.census()) == "seeded"
    rec = {**bench.rec, "scenarios": {"seeded": {"seed": seed, "phases": {}, "totals": {}}}}
    assert "made on another machine of the same stack (`given.tgz`" in render_timing.render(rec)[0]
    bench.rec["scenarios"] = {"seeded": {"seed": {**seed, "given": False}, "phases": {}, "totals": {}}}
    assert "another machine" not in render_timing.render(bench.rec)[0]


def test_a_missing_seed_bundle_is_refused_before_any_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        time_to_verdict.main(["--scenarios", "seeded", "--seed-bundle", str(tmp_path / "nope.tgz"),
                              "--base", str(tmp_path / "b"), "--out", str(tmp_path / "r.json")])
    assert f"--seed-bundle {tmp_path / 'nope.tgz'}: no such file" in capsys.readouterr().err
    assert not (tmp_path / "b").exists()


def test_a_stage_row_sums_what_its_gate_runs_compiled_ahead(tmp_path: Path) -> None:
    from kgate import paths

    stage_dir = tmp_path / paths.results("camp", "h100") / "baseline_tests"
    stage_dir.mkdir(parents=True)
    since = time.time() - 5
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(since + 2))

    def record(tests: list[dict], dependent: list[dict] | None = None) -> dict:
        data = {"run": {"tests": tests}} | ({"dependent": {"tests": dependent}} if dependent is not None else {})
        return {"stage": "baseline_tests", "status": "pass", "data": data,
                "provenance": {"started_utc": started, "wall_s": 1.0}}

    cold = [{"nodeid": "a", "compile_ahead_misses": 2, "compile_ahead_configs": 40, "compile_ahead_deferred": 1,
             "compile_ahead_abandoned": 1, "compile_ahead_wall_s": 30.25},
            {"nodeid": "b"},
            {"nodeid": "c", "compile_ahead_misses": 1, "compile_ahead_configs": 8, "compile_ahead_deferred": 0,
             "compile_ahead_wall_s": 4.5}]
    dep = [{"nodeid": "d", "compile_ahead_misses": 1, "compile_ahead_configs": 3, "compile_ahead_deferred": 0,
            "compile_ahead_wall_s": 1.0}]
    (stage_dir / "record.json").write_text(json.dumps(record(cold, dep)))
    (row,) = time_to_verdict.stage_rows(tmp_path, "camp", "h100", since)
    # a record from before the abandoned count (tests c and d) counts none there
    assert row["compiled_ahead"] == {"tests": 3, "misses": 4, "configs": 51, "deferred": 1, "abandoned": 1,
                                     "wall_s": 35.8}
    # a warm run (nothing compiled ahead) says so with None, not zeros
    (stage_dir / "record.json").write_text(json.dumps(record([{"nodeid": "a"}, {"nodeid": "b"}])))
    (row,) = time_to_verdict.stage_rows(tmp_path, "camp", "h100", since)
    assert row["compiled_ahead"] is None and row["precompiled"] is None


def test_a_stage_row_says_what_the_precompile_worker_beside_its_gate_did(tmp_path: Path) -> None:
    from kgate import paths

    stage_dir = tmp_path / paths.results("camp", "h100") / "candidate_gate" / "c1"
    stage_dir.mkdir(parents=True)
    since = time.time() - 5
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(since + 2))

    def write(precompile: dict) -> dict:
        (stage_dir / "record.json").write_text(json.dumps(
            {"stage": "candidate_gate", "candidate": "c1", "status": "pass", "data": {"precompile": precompile},
             "provenance": {"started_utc": started, "wall_s": 1.0}}))
        (row,) = time_to_verdict.stage_rows(tmp_path, "camp", "h100", since)
        return row

    row = write({"ran": True, "ended": "stopped", "wall_s": 51.2, "compiles_by_kernel": {"k": 12, "j": 1},
                 "compile_ahead_misses": 2, "compile_ahead_configs": 12, "compile_ahead_deferred": 0,
                 "compile_ahead_wall_s": 40.5})
    assert row["precompiled"] == {"ended": "stopped", "wall_s": 51.2, "compiles": 13,
                                  "ahead": {"misses": 2, "configs": 12, "deferred": 0, "abandoned": 0,
                                            "wall_s": 40.5}}
    # a worker without compile slots (zeros), or a record from before them (no keys): nothing ahead, said as None
    zeros = {"compile_ahead_misses": 0, "compile_ahead_configs": 0, "compile_ahead_deferred": 0,
             "compile_ahead_wall_s": 0.0}
    for keys in (zeros, {}):
        assert write({"ran": True, "ended": "done", "wall_s": 3.0, "compiles_by_kernel": {"k": 2}, **keys}
                     )["precompiled"] == {"ended": "done", "wall_s": 3.0, "compiles": 2, "ahead": None}
    assert write({"ran": False, "why": "CPU: the Triton interpreter compiles nothing"})["precompiled"] is None
