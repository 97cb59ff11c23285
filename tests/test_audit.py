"""``python -m kgate audit``: overlap of campaigns on one target, and kgate never pushing anything."""

from __future__ import annotations

import dataclasses
import fnmatch
import itertools
import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kgate import audit
from kgate.audit import glob_overlap, pathspec_globs

REPO = Path(__file__).resolve().parent.parent
CAMPAIGNS = REPO / "config" / "campaigns"


def _kgate(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    return subprocess.run([sys.executable, "-m", "kgate", *args], cwd=REPO, capture_output=True, text=True,
                          env=env, timeout=120)


def _campaign(tmp: Path, base: str, name: str, **changes: object) -> Path:
    """A copy of a shipped campaign under another name; ``changes`` replace top-level or candidate keys."""
    data = yaml.safe_load((CAMPAIGNS / f"{base}.yaml").read_text())
    data["name"] = name
    for key, value in changes.items():
        if key == "allowed_paths":
            data["candidate"]["allowed_paths"] = value
        elif value is None:
            data.pop(key, None)
        else:
            data[key] = value
    tmp.mkdir(parents=True, exist_ok=True)
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path



@pytest.mark.parametrize(("a", "b", "overlap"), [
    ("fla/ops/rwkv6/chunk.py", "fla/ops/rwkv6/chunk.py", True),
    ("fla/ops/rwkv6/chunk.py", "fla/ops/utils/cumsum.py", False),
    ("fla/ops/rwkv6/*.py", "fla/ops/rwkv6/chunk.py", True),
    ("fla/ops/*", "*/cumsum.py", True),               # fnmatch's * crosses '/': fla/ops/cumsum.py, fla/ops/x/cumsum.py
    ("fla/ops/rwkv6/*.py", "fla/ops/rwkv7/*.py", False),
    ("fla/ops/*.py", "fla/ops/*.cu", False),
    ("fla/ops/*.py", "fla/ops/*", True),
    ("fla/ops/rwkv[67]/chunk.py", "fla/ops/rwkv7/*", True),
    ("fla/ops/rwkv[!7]/chunk.py", "fla/ops/rwkv7/*", False),
    ("fla/ops/rwkv[0-5]/*", "fla/ops/rwkv6/*", False),
    ("fla/ops/rwkv?/x.py", "fla/ops/rwkv/x.py", False),
    ("*", "anything/at/all", True),
    ("a*b*c", "*x*", True),
    ("a*b", "*c", False),
    ("[]]", "]", True),                               # a leading ']' is a member of the class
    ("[!]]", "]", False),
    ("[", "[", True),                                 # an unclosed '[' is a literal
    ("a[", "a?", True),
    ("[]", "[]", True),                               # '[]' never closes here: two literals
])
def test_glob_overlap_known_cases(a: str, b: str, overlap: bool) -> None:
    got = glob_overlap(a, b)
    assert (got is not None) is overlap, (a, b, got)
    if got is not None:
        assert fnmatch.fnmatchcase(got, a) and fnmatch.fnmatchcase(got, b), (a, b, got)
    assert (glob_overlap(b, a) is not None) is overlap


def test_glob_overlap_matches_brute_force() -> None:
    """Never misses an overlap that exists, and every example it gives matches both globs."""
    rng = random.Random(20240601)
    pieces = ["a", "b", "/", "*", "?", "[ab]", "[!a]", "[a-b]", "[!]/]", ".", "[", "]"]
    alphabet = "ab/.c]["
    strings = ["".join(p) for n in range(5) for p in itertools.product(alphabet, repeat=n)]
    for _ in range(400):
        a = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 4)))
        b = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 4)))
        got = glob_overlap(a, b)
        ra, rb = re.compile(fnmatch.translate(a)), re.compile(fnmatch.translate(b))
        brute = next((s for s in strings if ra.match(s) and rb.match(s)), None)
        if brute is not None:
            assert got is not None, (a, b, brute)
        if got is not None:
            assert fnmatch.fnmatchcase(got, a) and fnmatch.fnmatchcase(got, b), (a, b, got)


def test_frozen_pathspecs_cover_folders_and_globs() -> None:
    def hits(spec: str, glob: str) -> bool:
        return any(glob_overlap(g, glob) is not None for g in pathspec_globs(spec))

    assert hits("fla/utils", "fla/utils/__init__.py")        # a folder freezes everything under it
    assert hits("fla/utils/", "fla/utils/*.py")
    assert not hits("fla/utils", "fla/utilsx.py")
    assert hits("tests/*.py", "tests/ops/test_x.py")          # git's * crosses '/'
    # a pathspec with wildcards matches as a glob and literally (git does both)
    assert hits("a[1].py", "a1.py") and hits("a[1].py", "a[[]1].py") and not hits("a[1].py", "a2.py")
    assert hits("a.py", "a.py") and not hits("a?py", "b.py")



def test_shipped_campaigns_do_not_overlap() -> None:
    result = audit.audit(audit.campaign_specs(None))
    assert result["exit"] == 0, result["warnings"]
    names = {c["name"] for c in result["campaigns"]}
    assert names == {p.stem for p in CAMPAIGNS.glob("*.yaml")}
    for t in result["targets"]:
        for p in t["pairs"]:
            assert p["allowed"] == []


def test_same_pypi_target_is_one_group_and_frozen_overlap_is_information(tmp_path) -> None:
    result = audit.audit(["rwkv6-bwd-fusion", "chunk-local-cumsum-identity", "rwkv6-bwd-fusion-upstream"])
    groups = {t["target"]: t for t in result["targets"]}
    pypi = groups["pypi:fla-core==0.6.0"]
    assert pypi["campaigns"] == ["chunk-local-cumsum-identity", "rwkv6-bwd-fusion"]
    (pair,) = pypi["pairs"]
    assert pair["allowed"] == []
    assert {o["example"] for o in pair["frozen"]} >= {"tests/conftest.py"}
    repo_keys = [k for k in groups if k.startswith("repo:")]
    assert len(repo_keys) == 1 and repo_keys[0].endswith("@27967b970eaaf982a6960abf6cba8add9c34c7cc")
    assert result["exit"] == 0


def test_allowed_overlap_is_a_warning_naming_both_campaigns_and_exit_1(tmp_path) -> None:
    wide = _campaign(tmp_path, "rwkv6-bwd-fusion", "rwkv6-wide", allowed_paths=["fla/ops/rwkv6/*.py"])
    out = tmp_path / "audit.json"
    proc = _kgate("audit", "--campaigns", f"rwkv6-bwd-fusion,{wide}", "--json", str(out))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    warnings = [ln for ln in proc.stdout.splitlines() if ln.startswith("warning:")]
    assert len(warnings) == 1
    assert "rwkv6-bwd-fusion" in warnings[0] and "rwkv6-wide" in warnings[0]
    assert "fla/ops/rwkv6/chunk.py" in warnings[0] and "fla/ops/rwkv6/*.py" in warnings[0]
    # the wide glob also reaches files the other campaign freezes: a note, not a warning
    assert any("freezes (fla/ops/rwkv6/fused_recurrent.py)" in ln for ln in proc.stdout.splitlines())
    assert "never pushes branches or opens pull requests" in proc.stdout
    data = json.loads(out.read_text())
    assert data["schema"] == "kgate.audit/1" and data["exit"] == 1
    (target,) = data["targets"]
    (pair,) = target["pairs"]
    assert pair["allowed"] == [{"a": "fla/ops/rwkv6/chunk.py", "b": "fla/ops/rwkv6/*.py",
                                "example": "fla/ops/rwkv6/chunk.py"}]
    # both time the op and, in the model stage, the same causal LM
    assert [s["op"] for s in pair["timed"]["shared"]] == ["model:fla.models.rwkv6:RWKV6ForCausalLM",
                                                        "op:fla.ops.rwkv6:chunk_rwkv6"]


def test_missing_timed_sections_are_said_to_be_none_declared(tmp_path) -> None:
    # no dispatch section either: its comparison rows run measure.callable (kgate.campaign_checks)
    bare = _campaign(tmp_path, "rwkv6-bwd-fusion", "rwkv6-untimed", measure=None, profile=None, bench=None,
                     model=None, notes=None, dispatch=None, allowed_paths=["fla/ops/rwkv6/fused_chunk.py"])
    proc = _kgate("audit", "--campaigns", f"rwkv6-bwd-fusion,{bare}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "none declared (no measure," in proc.stdout
    assert "rwkv6-untimed declares no timed surface" in proc.stdout
    assert "rwkv6-untimed: none recorded" in proc.stdout
    assert "result: no allowed-path overlap" in proc.stdout
    data = json.loads(_kgate("audit", "--campaigns", f"rwkv6-bwd-fusion,{bare}", "--json", "-").stdout)
    untimed = next(c for c in data["campaigns"] if c["name"] == "rwkv6-untimed")
    assert untimed["timed_sections"] == [] and untimed["timed"] == {}


def test_different_targets_are_never_compared(tmp_path) -> None:
    other = _campaign(tmp_path, "rwkv6-bwd-fusion", "rwkv6-next",
                      target={"pypi": {"requirement": "fla_core==0.6.1", "sha256": "0" * 64,
                                       "gate_suite": ["kernels/rwkv6_bwd_fused/oracle"]}})
    result = audit.audit(["rwkv6-bwd-fusion", str(other)])
    assert [t["campaigns"] for t in result["targets"]] == [["rwkv6-bwd-fusion"], ["rwkv6-next"]]
    assert result["exit"] == 0
    # PEP 503 normalization: fla_core and fla-core are one project
    assert result["targets"][1]["target"] == "pypi:fla-core==0.6.1"


def test_two_files_with_one_campaign_name_share_a_lane(tmp_path) -> None:
    a = _campaign(tmp_path / "a", "chunk-local-cumsum-identity", "lane-twin")
    b = _campaign(tmp_path / "b", "chunk-local-cumsum-identity", "lane-twin")
    proc = _kgate("audit", "--campaigns", f"{a},{b}")
    assert proc.returncode == 1
    assert "warning: lane collision" in proc.stdout and "lane-twin" in proc.stdout


def test_an_unloadable_campaign_is_an_error_exit_2(tmp_path) -> None:
    proc = _kgate("audit", "--campaigns", "no-such-campaign")
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("kgate: error:") and "no-such-campaign" in proc.stderr
    broken = _campaign(tmp_path, "rwkv6-bwd-fusion", "broken", surprise=1)
    proc = _kgate("audit", "--campaigns", str(broken))
    assert proc.returncode == 2 and "surprise" in proc.stderr



# git operations that write to, or talk to, another repository; and forges' CLIs and APIs
_REMOTE_CALLS = [
    re.compile(r"\bgit\b[^\n]{0,80}?\b(push|remote|ls-remote|send-pack|request-pull)\b"),
    re.compile(r"""["'](push|remote|ls-remote|send-pack|request-pull)["']"""),
    re.compile(r"\bgh\s+(pr|api|repo|release)\b"),
    re.compile(r"""["']gh["']"""),
    re.compile(r"api\.github\.com|/api/v4/projects|/pulls\b"),
    re.compile(r"^\s*(import|from)\s+(git|pygit2|dulwich|github|gitlab)\b", re.MULTILINE),
]


def _sources() -> list[Path]:
    files = sorted((REPO / "kgate").rglob("*.py")) + sorted((REPO / "workflow").rglob("*.smk"))
    files += [REPO / "Snakefile"] + sorted((REPO / "scripts").rglob("*.py")) + sorted((REPO / "scripts").rglob("*.sh"))
    return [f for f in files if f.is_file() and "__pycache__" not in f.parts]


def test_kgate_never_pushes_or_opens_pull_requests() -> None:
    sources = _sources()
    assert any(f.parent.name == "source" and f.name == "git.py" for f in sources)
    found = []
    for f in sources:
        text = f.read_text(errors="replace")
        for pattern in _REMOTE_CALLS:
            for m in pattern.finditer(text):
                line = text.count("\n", 0, m.start()) + 1
                found.append(f"{f.relative_to(REPO)}:{line}: {m.group(0).strip()}")
    assert not found, "kgate must not push, add remotes or talk to a forge:\n" + "\n".join(found)


def test_the_remote_call_patterns_catch_what_they_should() -> None:
    caught = ['git("push", "origin", branch)', "git push origin kgate/x/cand", 'run(["gh", "pr", "create"])',
              'gitops.git("--git-dir", repo, "remote", "add", "up", url)', "import pygit2",
              "requests.post('https://api.github.com/repos/o/r/pulls')"]
    for text in caught:
        assert any(p.search(text) for p in _REMOTE_CALLS), text
    for text in ['git("fetch", "--quiet", "--no-tags", str(src))', "kgate never pushes branches",
                 'git("worktree", "add", "-B", branch)']:
        assert not any(p.search(text) for p in _REMOTE_CALLS), text


def test_one_change_under_two_contracts_is_a_note_not_an_overlap() -> None:
    """The two replays of Liger-Kernel #945 name the same candidate commit: their allowed paths overlap by
    construction (a note); two different candidates allowing the same file still warn (exit 1)."""
    result = audit.audit(["liger-layer-norm-bwd-945", "liger-layer-norm-bwd-945-large-rows"])
    (target,) = result["targets"]
    (pair,) = target["pairs"]
    assert pair["allowed"] == [] and pair["same_change"]["ref"].startswith("540575bc")
    assert pair["same_change"]["allowed"][0]["example"] == "src/liger_kernel/ops/layer_norm.py"
    assert result["exit"] == 0 and not result["warnings"]
    assert any("judge the same change 540575bc2bba" in n for n in result["notices"])
    a = audit.audit_campaign(audit.campaign_mod.load("liger-layer-norm-bwd-945"))
    other = dataclasses.replace(a, name="other", change="0" * 40)
    assert audit.compare(a, other)["allowed"] and audit.compare(a, other)["same_change"] is None
