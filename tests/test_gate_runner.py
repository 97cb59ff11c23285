"""The gate runner on real pytest processes: outcomes, crashes, hangs, empty selections, isolation."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from kgate.errors import ConfigError, KgateError, ProvenanceMismatch
from kgate.testrun import runner as gate


def tree(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "target"
    for name, text in files.items():
        p = root / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    return root


def spec(**kw) -> gate.GateSpec:
    base = dict(tests=("tests",), select=None, pytest_args=(), forbid_env=(), python_path=(".",), cpu=False,
                cpu_setup=None, test_timeout_s=60, run_timeout_s=120, workers=1)
    base.update(kw)
    return gate.GateSpec(**base)


TOY = {"toy/__init__.py": "def f(x):\n    return x + 1\n"}


def test_outcomes_are_recorded_per_test(tmp_path: Path) -> None:
    """Passed, failed, skipped, xfailed and deselected ids are all recorded with messages."""
    root = tree(tmp_path, {**TOY, "tests/test_a.py": (
        "import pytest\nfrom toy import f\n"
        "def test_ok():\n    assert f(1) == 2\n"
        "def test_bad():\n    assert f(1) == 3, 'off by one'\n"
        "@pytest.mark.skip(reason='not here')\ndef test_skip():\n    pass\n"
        "@pytest.mark.xfail\ndef test_xf():\n    assert False\n"
        "def test_other():\n    pass\n")})
    run = gate.run(spec(select="not other"), root, tmp_path / "out", tmp_path / "cache", tag="t")
    assert run.counts == {"passed": 1, "failed": 1, "skipped": 1, "xfailed": 1}
    assert run.deselected == ["tests/test_a.py::test_other"]
    assert run.bad_ids == ["tests/test_a.py::test_bad"]
    bad = run.tests["tests/test_a.py::test_bad"]
    assert "off by one" in bad["message"]
    assert not run.green and not run.crashed and not run.timed_out
    gate.check_imports(run, root)


def test_a_crash_is_measured_with_the_running_test(tmp_path: Path) -> None:
    """A process that dies mid-run keeps the finished tests and names the one that was running."""
    root = tree(tmp_path, {**TOY, "tests/test_a.py": (
        "import os\ndef test_1():\n    pass\ndef test_2():\n    os.abort()\ndef test_3():\n    pass\n")})
    run = gate.run(spec(), root, tmp_path / "out", tmp_path / "cache", tag="t")
    assert run.crashed and not run.green
    assert run.running_at_end == "tests/test_a.py::test_2"
    assert run.tests["tests/test_a.py::test_1"]["outcome"] == "passed"
    assert set(run.bad_ids) == {"tests/test_a.py::test_2", "tests/test_a.py::test_3"}


def test_a_hang_is_a_measured_timeout(tmp_path: Path) -> None:
    """A test that never returns is killed at the run timeout and recorded, not an error."""
    root = tree(tmp_path, {**TOY, "tests/test_a.py": "import time\ndef test_hang():\n    time.sleep(600)\n"})
    run = gate.run(spec(test_timeout_s=600, run_timeout_s=5), root, tmp_path / "out", tmp_path / "cache", tag="t")
    assert run.timed_out and not run.green
    assert run.bad_ids == ["tests/test_a.py::test_hang"]
    assert "timed out" in run.summary()


def test_per_test_timeout_fails_that_test(tmp_path: Path) -> None:
    root = tree(tmp_path, {**TOY, "tests/test_a.py": "import time\ndef test_slow():\n    time.sleep(30)\n"
                           "def test_fast():\n    pass\n"})
    run = gate.run(spec(test_timeout_s=2), root, tmp_path / "out", tmp_path / "cache", tag="t")
    assert run.tests["tests/test_a.py::test_slow"]["outcome"] == "failed"
    assert "Timeout" in run.tests["tests/test_a.py::test_slow"]["message"]
    assert run.tests["tests/test_a.py::test_fast"]["outcome"] == "passed"


def test_an_empty_selection_is_a_config_error(tmp_path: Path) -> None:
    root = tree(tmp_path, {**TOY, "tests/test_a.py": "def test_1():\n    pass\n"})
    with pytest.raises(ConfigError, match="no test was collected"):
        gate.run(spec(select="nothing_matches"), root, tmp_path / "out", tmp_path / "cache", tag="t")


def test_a_collection_error_is_measured(tmp_path: Path) -> None:
    """An import error in the code under test is a result (the candidate broke it), with the message."""
    root = tree(tmp_path, {"toy/__init__.py": "raise ImportError('candidate broke the module')\n",
                           "tests/test_a.py": "from toy import f\ndef test_1():\n    pass\n"})
    run = gate.run(spec(), root, tmp_path / "out", tmp_path / "cache", tag="t")
    assert not run.green and run.collect_errors
    assert "candidate broke the module" in run.collect_errors[0]["message"]


def test_code_imported_from_outside_the_worktree_is_refused(tmp_path: Path) -> None:
    """If the tested package comes from anywhere but the worktree, the run is an error."""
    # os is imported at interpreter start-up, before the worktree is on sys.path: the
    # worktree's os.py can never be the one in use, exactly the situation to refuse
    root = tree(tmp_path, {"os.py": "", "tests/test_a.py": "import os\ndef test_1():\n    pass\n"})
    run = gate.run(spec(), root, tmp_path / "out", tmp_path / "cache", tag="t")
    with pytest.raises(ProvenanceMismatch, match="'os' was imported from"):
        gate.check_imports(run, root)


def test_forbidden_environment_variable_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tree(tmp_path, {**TOY, "tests/test_a.py": "def test_1():\n    pass\n"})
    monkeypatch.setenv("FLA_CI_ENV", "1")
    with pytest.raises(ConfigError, match="FLA_CI_ENV"):
        gate.run(spec(forbid_env=("FLA_CI_ENV",)), root, tmp_path / "out", tmp_path / "cache", tag="t")


def test_configuration_above_the_worktree_does_not_leak(tmp_path: Path) -> None:
    """pytest's rootdir and conftest search stay inside the worktree."""
    (tmp_path / "pyproject.toml").write_text("[tool.pytest.ini_options]\naddopts = '-x --bogus-flag'\n")
    (tmp_path / "conftest.py").write_text("raise RuntimeError('outer conftest was imported')\n")
    root = tree(tmp_path, {**TOY, "tests/test_a.py": "def test_1():\n    pass\n"})
    run = gate.run(spec(), root, tmp_path / "out", tmp_path / "cache", tag="t")
    assert run.green, run.summary()
    assert run.collected == ["tests/test_a.py::test_1"]


def test_a_worker_killed_from_outside_is_an_error_not_a_result(tmp_path: Path) -> None:
    """SIGKILL from outside (OOM killer, an operator) says nothing about the candidate: no record."""
    root = tree(tmp_path, {**TOY, "tests/test_a.py": "import os, signal\ndef test_1():\n"
                           "    os.kill(os.getpid(), signal.SIGKILL)\n"})
    with pytest.raises(KgateError, match="killed by SIGKILL from outside kgate"):
        gate.run(spec(), root, tmp_path / "out", tmp_path / "cache", tag="t")


def test_gate_env_is_set_in_every_test_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """gate.env reaches each xdist worker, overrides the caller's value and is recorded with the run."""
    monkeypatch.setenv("KG_ORDER_FLAG", "from-caller")
    root = tree(tmp_path, {**TOY, "tests/test_a.py": (
        "import os\nimport pytest\n"
        "@pytest.mark.parametrize('i', range(4))\n"
        "def test_sees_flag(i):\n"
        "    assert os.environ.get('KG_ORDER_FLAG') == 'serial-order', os.environ.get('KG_ORDER_FLAG')\n")})
    bare = gate.run(spec(workers=2, env_record=("KG_*",)), root, tmp_path / "o1", tmp_path / "cache", tag="t")
    assert len(bare.bad_ids) == 4
    run = gate.run(spec(workers=2, env_record=("KG_*",), env_set=(("KG_ORDER_FLAG", "serial-order"),)),
                   root, tmp_path / "o2", tmp_path / "cache", tag="t")
    assert run.green and run.counts == {"passed": 4}
    assert run.test_env.get("KG_ORDER_FLAG") == "serial-order"
    # a finished run leaves its merged outcome record, not the xdist workers' files (they serve a resume)
    assert (tmp_path / "o2" / "t.outcomes.json").exists()
    assert not list((tmp_path / "o2").glob("t.outcomes.json.gw*"))


def test_gate_restore_env_gives_every_test_the_same_start_under_xdist(tmp_path: Path) -> None:
    """Tests that set a variable and never restore it: under xdist each worker's later tests see the leftover;
    gate.restore_env puts it back after every test, and the run's recorded command says so."""
    root = tree(tmp_path, {**TOY, "tests/test_a.py": (
        "import os\nimport pytest\n"
        "@pytest.mark.parametrize('i', range(6))\n"
        "def test_leaks(i):\n"
        "    assert 'KG_LEAK' not in os.environ, os.environ['KG_LEAK']\n"
        "    os.environ['KG_LEAK'] = str(i)\n")})
    bare = gate.run(spec(workers=2, env_record=("KG_*",)), root, tmp_path / "o1", tmp_path / "cache", tag="t")
    assert len(bare.bad_ids) >= 4, bare.summary()          # at most one first test per worker passes
    run = gate.run(spec(workers=2, env_record=("KG_*",), restore_env=("KG_LEAK",)), root, tmp_path / "o2",
                   tmp_path / "cache", tag="t")
    assert run.green and run.counts == {"passed": 6}, run.summary()
    assert "--kgate-restore-env=KG_LEAK" in run.command and "-n" in run.command


def test_gate_env_may_not_set_a_forbidden_variable(tmp_path: Path) -> None:
    root = tree(tmp_path, {**TOY, "tests/test_a.py": "def test_x():\n    pass\n"})
    with pytest.raises(ConfigError, match="gate.env: FLA_CI_ENV is also in gate.forbid_env"):
        gate.run(spec(forbid_env=("FLA_CI_ENV",), env_set=(("FLA_CI_ENV", "1"),)), root, tmp_path / "o",
                 tmp_path / "cache", tag="t")


def _interrupted(tmp_path: Path, workers: int) -> tuple[Path, Path, Path]:
    """A committed toy target whose test_4 blocks while ``slow`` exists; a gate run of it in a child process
    is interrupted (SIGINT, as Snakemake or Ctrl-C sends it) once test_1..test_4 have started (test_5 too,
    where a second xdist worker took it)."""
    import os
    import signal
    import sys
    import time

    runs, slow = tmp_path / "runs.log", tmp_path / "slow"
    body = "import os, time\n"
    for i in range(1, 6):
        body += (f"def test_{i}():\n    open({str(runs)!r}, 'a').write('test_{i}\\n')\n"
                 + (f"    while os.path.exists({str(slow)!r}):\n        time.sleep(0.2)\n" if i == 4 else ""))
    root = tree(tmp_path, {**TOY, "tests/test_a.py": body})
    subprocess.run(["git", "-C", str(root), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(root), "-c", "user.name=k", "-c", "user.email=k@k", "commit", "-qm", "toy"],
                   check=True)
    slow.write_text("")
    script = (f"from pathlib import Path\nfrom kgate.testrun import runner as gate\nimport test_gate_runner as t\n"
              f"gate.run(t.spec(workers={workers}), Path({str(root)!r}), Path({str(tmp_path / 'out')!r}), "
              f"Path({str(tmp_path / 'cache')!r}), tag='t')\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).parent), *sys.path]))
    child = subprocess.Popen([sys.executable, "-c", script], env=env, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while time.time() < deadline and (not runs.exists() or len(runs.read_text().split()) < 4):
        time.sleep(0.2)
    time.sleep(1)  # let the outcome files catch up with the last teardown
    child.send_signal(signal.SIGINT)
    _, err = child.communicate(timeout=60)
    assert child.returncode != 0 and "interrupted by signal SIGINT" in err
    assert {"test_1", "test_2", "test_3", "test_4"} <= set(runs.read_text().split())
    return root, runs, slow


@pytest.mark.parametrize("workers", [1, 2])
def test_an_interrupted_run_resumes_with_the_tests_it_finished(tmp_path: Path, workers: int) -> None:
    """The next attempt of the same commit carries the finished tests over and runs only the rest, starting with
    the one that was running when it was cut; a finished attempt is then measured afresh."""
    root, runs, slow = _interrupted(tmp_path, workers)
    finished = sorted(set(runs.read_text().split()) - {"test_4"})
    slow.unlink()
    runs.write_text("")
    again = gate.run(spec(workers=workers), root, tmp_path / "out", tmp_path / "cache", tag="t")
    ids = [f"tests/test_a.py::test_{i}" for i in range(1, 6)]
    assert sorted(runs.read_text().split()) == sorted({f"test_{i}" for i in range(1, 6)} - set(finished))
    assert sorted(again.carried) == [f"tests/test_a.py::{t}" for t in finished]
    assert again.green and sorted(again.collected) == ids and sorted(again.tests) == ids and not again.deselected
    assert f"{len(finished)} of them carried over from an interrupted attempt" in again.summary()
    assert "carried over" in Path(again.log).read_text()
    runs.write_text("")
    fresh = gate.run(spec(workers=workers), root, tmp_path / "out", tmp_path / "cache", tag="t")
    assert sorted(runs.read_text().split()) == ["test_1", "test_2", "test_3", "test_4", "test_5"]
    assert fresh.green and not fresh.carried


def test_an_interrupted_run_of_another_commit_is_not_resumed(tmp_path: Path) -> None:
    """A new commit (or changed settings) is another attempt key: every test runs again."""
    root, runs, slow = _interrupted(tmp_path, 1)
    slow.unlink()
    (root / "toy" / "__init__.py").write_text("def f(x):\n    return x + 2\n")
    subprocess.run(["git", "-C", str(root), "-c", "user.name=k", "-c", "user.email=k@k", "commit", "-qam", "edit"],
                   check=True)
    runs.write_text("")
    again = gate.run(spec(), root, tmp_path / "out", tmp_path / "cache", tag="t")
    assert sorted(runs.read_text().split()) == ["test_1", "test_2", "test_3", "test_4", "test_5"]
    assert again.green and not again.carried


def test_under_xdist_a_test_still_running_at_the_timeout_has_no_outcome(tmp_path: Path) -> None:
    """Two workers: one test hangs while the other worker runs the rest; at the run timeout the hung test is
    not finished (no entry: its setup passing does not make it passed) and the others keep their outcomes."""
    root = tree(tmp_path, {**TOY, "tests/test_a.py": (
        "import time\ndef test_hang():\n    time.sleep(600)\n"
        + "".join(f"def test_{i}():\n    pass\n" for i in range(4)))})
    run = gate.run(spec(test_timeout_s=600, run_timeout_s=20, workers=2), root, tmp_path / "out",
                   tmp_path / "cache", tag="t")
    assert run.timed_out and not run.green
    assert len(run.collected) == 5, "the collection comes from the workers' files when the controller was cut"
    assert "tests/test_a.py::test_hang" not in run.tests and "tests/test_a.py::test_hang" in run.bad_ids
    assert run.running_at_end == "tests/test_a.py::test_hang"
    # the tests the other worker ran (xdist may queue one behind the hung test: that one never ran)
    assert len(run.tests) >= 2 and {t["outcome"] for t in run.tests.values()} == {"passed"}
    assert sorted(run.bad_ids) == sorted(set(run.collected) - set(run.tests))
    assert f"{len(run.bad_ids)} not finished" in run.summary()


def test_a_src_layout_package_installed_elsewhere_is_refused(tmp_path: Path) -> None:
    """A target whose package lives under src/ (gate.python_path [src]): the package is checked too. The worktree's
    src/os.py can never be the os in use (the interpreter imports its own at start-up): the run is an error, where
    a check of the worktree's root alone would see nothing under test."""
    root = tree(tmp_path, {"src/os.py": "", "tests/test_a.py": "import os\ndef test_1():\n    pass\n"})
    run = gate.run(spec(python_path=("src", ".")), root, tmp_path / "out", tmp_path / "cache", tag="t")
    assert "os" in run.imports
    with pytest.raises(ProvenanceMismatch, match="'os' was imported from"):
        gate.check_imports(run, root)
    ok = tree(tmp_path / "ok", {"src/toy/__init__.py": TOY["toy/__init__.py"],
                                "tests/test_a.py": "from toy import f\ndef test_1():\n    assert f(1) == 2\n"})
    run = gate.run(spec(python_path=("src", ".")), ok, tmp_path / "out2", tmp_path / "cache", tag="t")
    assert run.green and run.imports["toy"].startswith(str((ok / "src" / "toy").resolve()))
    gate.check_imports(run, ok)
