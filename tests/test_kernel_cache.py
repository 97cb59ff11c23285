"""The kernel cache (kgate.cache): one Triton cache per stack, shared by campaigns, stages and arms.

Real here: the repository's two fla campaigns on one target and the cache folder their stages get;
Triton compiling kernels for an H200's architecture (cuda sm_90, with the ptxas Triton ships) into
that folder, without a GPU; Triton's autotuner keying, writing and reading its timings on disk;
kgate's bundles through ``python -m kgate cache``. Stand-ins, named where they are used, for what
needs a GPU: the target's kernels are a small module written here (fla-core is not installed), the
autotuner's benchmark timings come from a seeded random generator and its final launch does
nothing, and a bundle "from another machine" is made from a stack whose facts are written here.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import tarfile
import textwrap
from pathlib import Path

import pytest

from kgate import campaign, paths
from kgate.cache import bundle
from kgate.cache import stack as stack_mod
from kgate.cache.stack import Stack
from kgate.cache.store import KernelCache
from kgate.errors import ConfigError
from kgate.gates.bench import autotune_diff, autotune_picks
from kgate.stages.common import Context
from kgate.testrun import runner

REPO = Path(__file__).resolve().parent.parent
FLA_CAMPAIGNS = ("rwkv6-bwd-fusion", "chunk-local-cumsum-identity")
H200 = {"class": "h200", "name": "NVIDIA H200", "uuid": "GPU-0", "capability": "9.0", "driver": "580.159.04"}

# A stand-in for the target's kernel module (fla-core is not installed here): three kernels, the middle one
# is the one a candidate edits. EDIT keeps the line count, so the kernel below it keeps its Triton key.
KERNELS = textwrap.dedent('''\
    import triton
    import triton.language as tl


    @triton.jit
    def scale(x_ptr, n, BLOCK: tl.constexpr):
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(x_ptr + i, tl.load(x_ptr + i, mask=i < n) * 2.0, mask=i < n)


    @triton.jit
    def shift(x_ptr, n, BLOCK: tl.constexpr):
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(x_ptr + i, tl.load(x_ptr + i, mask=i < n) + 1.0, mask=i < n)


    @triton.jit
    def square(x_ptr, n, BLOCK: tl.constexpr):
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        v = tl.load(x_ptr + i, mask=i < n)
        tl.store(x_ptr + i, v * v, mask=i < n)
''')
EDIT = ("+ 1.0, mask=i < n)", "+ 3.0, mask=i < n)")

# Compiles every kernel of the module for cuda sm_90 into $TRITON_CACHE_DIR (a real compile; no GPU needed).
COMPILE = textwrap.dedent('''\
    import json, sys
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    import kernels
    sig = {"x_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}
    out = {}
    for name in ("scale", "shift", "square"):
        fn = getattr(kernels, name)
        k = triton.compile(ASTSource(fn=fn, signature=sig, constexprs={"BLOCK": 128}), target=GPUTarget("cuda", 90, 32))
        out[name] = {"hash": k.hash, "key": fn.cache_key}
    print(json.dumps(out))
''')

# One arm tuning two autotuned kernels, ``tuned`` (both arms' source) and ``edited`` (the candidate's own).
TUNED = textwrap.dedent('''\
    import triton
    import triton.language as tl

    CONFIGS = [triton.Config({"BLOCK": b}, num_warps=w) for b in (32, 64, 128, 256) for w in (2, 4)]


    @triton.autotune(configs=CONFIGS, key=["n"])
    @triton.jit
    def tuned(x_ptr, n, BLOCK: tl.constexpr):
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(x_ptr + i, tl.load(x_ptr + i, mask=i < n) * 2.0, mask=i < n)


    @triton.autotune(configs=CONFIGS, key=["n"])
    @triton.jit
    def edited(x_ptr, n, BLOCK: tl.constexpr):
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(x_ptr + i, tl.load(x_ptr + i, mask=i < n) + 1.0, mask=i < n)
''')
TUNED_EDIT = ("+ 1.0, mask=i < n)", "+ 5.0, mask=i < n)")

ARM = textwrap.dedent('''\
    import json, random, sys
    from triton.backends.compiler import GPUTarget
    from triton.runtime import driver
    from triton.runtime.jit import JITFunction

    class StandInDriver:
        """FAKE (no GPU here): reports an H200's target (cuda sm_90); its benchmarker returns timings from this
        arm's own seeded generator, so two arms that each tuned would disagree."""
        def __init__(self, seed):
            self.rng = random.Random(seed)
        def get_current_target(self):
            return GPUTarget("cuda", 90, 32)
        def get_benchmarker(self):
            return lambda kernel_call, quantiles: [self.rng.random()] * 3
        def get_active_torch_device(self):
            raise RuntimeError("no device")

    driver.set_active(StandInDriver(int(sys.argv[1])))
    JITFunction.run = lambda self, *args, **kwargs: None  # FAKE: the tuned kernel's launch (no GPU here)
    import tuned_kernels as m
    from kgate.measure.census import kernel_name, source_sha, triton_key
    tuners, picks = [], {}
    for t in (m.tuned, m.edited):
        t[(1,)](0, 4096)
        picks[kernel_name(t)] = [str(t.best_config)]
        tuners.append({"kernel": kernel_name(t), "source_sha": source_sha(t.fn), "triton_key": triton_key(t.fn)})
    print(json.dumps({"tuners": tuners, "row_picks": {"r": {"fwd": picks}},
                      "sources": {x["kernel"]: x["source_sha"] for x in tuners}}))
''')


def _context(name: str, root: Path, device: dict | None = None, gpu: str = "cpu") -> Context:
    args = argparse.Namespace(stage="baseline_tests", kernel_cache=str(root), workers="1", runtime_min=10.0,
                              test_timeout_s=900, force=False)
    return Context(campaign=campaign.load(name), gpu=gpu, candidate=None, args=args,
                   device=device or {"class": "cpu", "name": "cpu"}, inputs={})


def _worktree(base: Path, name: str, files: dict[str, str]) -> Path:
    wt = base / name
    wt.mkdir(parents=True)
    for f, text in files.items():
        (wt / f).write_text(text)
    return wt


def _run(script: str, wt: Path, env: dict[str, str], *args: str) -> dict:
    full = {k: v for k, v in os.environ.items() if not k.startswith(("TRITON_", "PYTEST_XDIST"))}
    full.update(env, PYTHONPATH=os.pathsep.join([str(wt), str(REPO)]), PYTHONDONTWRITEBYTECODE="1")
    p = subprocess.run([sys.executable, "-c", script, *args], cwd=wt, env=full, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_both_fla_campaigns_get_one_cache_per_stack(tmp_path: Path) -> None:
    a, b = (_context(n, tmp_path) for n in FLA_CAMPAIGNS)
    assert a.campaign.target_identity == b.campaign.target_identity  # the same fla-core sdist
    assert a.triton_cache == b.triton_cache == paths.triton_cache(tmp_path, a.kernel_cache.stack.id)
    assert a.kernel_cache.stack.id.startswith("cpu-")
    on_h200 = _context(FLA_CAMPAIGNS[0], tmp_path, H200, "h200")
    assert on_h200.triton_cache != a.triton_cache and on_h200.kernel_cache.stack.id.startswith("h200-")
    other_driver = _context(FLA_CAMPAIGNS[0], tmp_path, {**H200, "driver": "570.86.10"}, "h200")
    assert other_driver.triton_cache != on_h200.triton_cache
    # every gate run and worker of both campaigns gets that folder and Triton's autotune cache switch
    for ctx in (a, b):
        env = runner.build_env(ctx.gate_spec(), tmp_path, ctx.triton_cache)
        assert env["TRITON_CACHE_DIR"] == str(a.triton_cache.resolve()) and env["TRITON_CACHE_AUTOTUNING"] == "1"


def test_a_second_campaign_on_the_target_compiles_only_the_kernel_it_changed(tmp_path: Path) -> None:
    first, second = (_context(n, tmp_path / "kernels", H200, "h200") for n in FLA_CAMPAIGNS)
    cache = first.kernel_cache
    cache.prepare()
    env = {"TRITON_CACHE_DIR": str(first.triton_cache.resolve()), **cache.env()}
    wt_a = _worktree(tmp_path, "a", {"kernels.py": KERNELS})
    wt_b = _worktree(tmp_path, "b", {"kernels.py": KERNELS.replace(*EDIT)})
    assert cache.state(cache.census()) == "cold"
    got_a = _run(COMPILE, wt_a, env)
    after_a = cache.census()
    assert after_a.kernels == 3, after_a
    assert cache.state(after_a) == "warm"
    env_b = {"TRITON_CACHE_DIR": str(second.triton_cache.resolve()), **second.kernel_cache.env()}
    got_b = _run(COMPILE, wt_b, env_b)
    after_b = cache.census()
    assert after_b.kernels - after_a.kernels == 1, (after_a, after_b)  # only `shift`, the edited kernel
    assert {k for k in got_a if got_a[k]["hash"] == got_b[k]["hash"]} == {"scale", "square"}
    # what Triton's key holds beyond the kernel's text: its first line's number (a documented limit)
    wt_c = _worktree(tmp_path, "c", {"kernels.py": KERNELS.replace("import triton\n", "import triton\n\n", 1)})
    got_c = _run(COMPILE, wt_c, env)
    assert all(got_c[k]["key"] != got_a[k]["key"] for k in got_a)
    assert cache.census().kernels == after_b.kernels + 3


def _arms(tmp_path: Path, caches: tuple[Path, Path]) -> dict[str, dict]:
    """BENCH_BASE then the candidate, each tuning in its own process on its own cache folder (seeds 1 and 2)."""
    out = {}
    for arm, seed, text, cache in (("base", "1", TUNED, caches[0]), ("cand", "2", TUNED.replace(*TUNED_EDIT), caches[1])):
        wt = _worktree(tmp_path / cache.name, arm, {"tuned_kernels.py": text})
        out[arm] = _run(ARM, wt, {"TRITON_CACHE_DIR": str(cache), "TRITON_CACHE_AUTOTUNING": "1"}, seed)
    return out


def test_unchanged_kernels_get_identical_picks_in_both_arms(tmp_path: Path) -> None:
    kc = KernelCache(tmp_path / "kernels", stack_mod.from_device(H200))
    kc.prepare()
    shared = _arms(tmp_path / "shared", (kc.triton, kc.triton))
    sources = {a: shared[a]["sources"] for a in shared}
    picks = {p["kernel"]: p for p in autotune_picks("r", "fwd", shared, sources)}
    assert picks["tuned"]["status"] == "shared" and picks["tuned"]["same"], picks
    assert picks["edited"]["status"] == "changed"
    assert autotune_diff("r", "fwd", shared, sources) == []
    assert kc.census().autotune == 2 + 1  # tuned once; edited once per arm (two sources)
    # the same arms on a cache each, as before the shared cache: the unchanged kernel is tuned twice and the
    # stand-in timings make the picks differ, which is what the shared cache removes
    apart = _arms(tmp_path / "apart", (tmp_path / "base-cache", tmp_path / "cand-cache"))
    assert apart["base"]["row_picks"] != apart["cand"]["row_picks"]
    diff = autotune_diff("r", "fwd", apart, {a: apart[a]["sources"] for a in apart})
    assert len(diff) == 1 and diff[0].startswith("tuned base") and "shared Triton key" in diff[0]


def _fill(cache: KernelCache, entries: dict[str, dict[str, str]]) -> None:
    cache.prepare()
    for entry, files in entries.items():
        (cache.triton / entry).mkdir()
        for name, text in files.items():
            (cache.triton / entry / name).write_text(text)


PICKS = {"AAAA": {"tuned.autotune.json": '{"key": [4096], "configs_timings": []}'},
         "BBBB": {"__grp__k.json": "{}", "k.cubin": "cubin", "k.json": "{}"}}


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}
    env["PYTHONPATH"] = str(REPO)
    return subprocess.run([sys.executable, "-m", "kgate", "cache", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)


def test_a_bundle_of_this_stack_seeds_the_cache(tmp_path: Path) -> None:
    here = stack_mod.detect()
    src = KernelCache(tmp_path / "src", here)
    _fill(src, PICKS)
    p = _cli("export", "b.tar.gz", "--kernel-cache", "src", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    names = tarfile.open(tmp_path / "b.tar.gz").getnames()
    assert names[0] == "manifest.json" and "triton/AAAA/tuned.autotune.json" in names and "triton/BBBB/k.cubin" not in names
    p = _cli("import", "b.tar.gz", "--kernel-cache", "dst", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    dst = KernelCache(tmp_path / "dst", here)
    census = dst.census()
    assert (census.autotune, census.kernels) == (1, 0) and dst.state(census) == "seeded"
    assert (dst.triton / "AAAA" / "tuned.autotune.json").read_text() == PICKS["AAAA"]["tuned.autotune.json"]
    again = bundle.import_bundle(tmp_path / "dst", tmp_path / "b.tar.gz", here)
    assert (again.placed, again.kept) == (0, 1)
    (dst.triton / "CCCC").mkdir()
    (dst.triton / "CCCC" / "__grp__x.json").write_text("{}")  # a kernel a stage compiled here
    assert dst.state(dst.census()) == "warm"
    info = json.loads(_cli("info", "--json", "--kernel-cache", "dst", cwd=tmp_path).stdout)
    assert [s["this_machine"] for s in info["stacks"]] == [True] and info["stacks"][0]["imported_entries"] == 1


def test_a_bundle_of_another_stack_is_refused_in_one_line(tmp_path: Path) -> None:
    here = stack_mod.detect()
    # FAKE: the stack of another machine (a GPU no machine has, so this holds on every node), written here
    there = stack_mod.from_device({**H200, "class": "x999", "name": "NVIDIA X999"})
    other = KernelCache(tmp_path / "kernels", there)
    _fill(other, PICKS)
    p = _cli("export", "other.tar", "--kernels", "--stack", there.id, "--kernel-cache", "kernels", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    p = _cli("import", "other.tar", "--kernel-cache", "kernels", cwd=tmp_path)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1, p.stderr
    assert lines[0].startswith("kgate: error: cache import: other.tar is a bundle of another stack: device_class x999 "
                               f"there, {here.device_class} here"), lines[0]
    assert not paths.stack_cache(tmp_path / "kernels", here.id).exists()  # nothing written
    # one differing fact is named alone
    driver_only = Stack(**{**{f: getattr(there, f) for f in Stack.__slots__}, "driver": "570.86.10"})
    with pytest.raises(ConfigError, match=r"another stack: driver 580\.159\.04 there, 570\.86\.10 here; nothing imported$"):
        bundle.import_bundle(tmp_path / "kernels", tmp_path / "other.tar", driver_only)


def test_a_tampered_bundle_is_refused(tmp_path: Path) -> None:
    here = stack_mod.detect()
    _fill(KernelCache(tmp_path / "src", here), PICKS)
    bundle.export(KernelCache(tmp_path / "src", here), tmp_path / "b.tar")
    with tarfile.open(tmp_path / "b.tar") as tf:
        members = [(m, tf.extractfile(m).read()) for m in tf.getmembers()]  # type: ignore[union-attr]
    with tarfile.open(tmp_path / "bad.tar", "w") as tf:
        for m, data in members:
            if m.name.endswith(".autotune.json"):
                data = data.replace(b"4096", b"8192")
                m.size = len(data)
            tf.addfile(m, io.BytesIO(data))
    with pytest.raises(Exception, match="does not match its sha256"):
        bundle.import_bundle(tmp_path / "dst", tmp_path / "bad.tar", here)
    assert not (paths.triton_cache(tmp_path / "dst", here.id) / "AAAA").exists()


def test_stage_provenance_names_the_stack_and_how_the_cache_started(tmp_path: Path) -> None:
    kc = KernelCache(tmp_path, stack_mod.from_device({"class": "cpu"}), ("KGATE_TEST_TARGET_CACHE",))
    kc.prepare()
    start = kc.census()
    (kc.target_dir("KGATE_TEST_TARGET_CACHE") / "picks.json").write_text("{}")
    prov = kc.provenance(start, kc.census())
    assert prov["state_at_start"] == "cold" and prov["added"]["target_files"] == 1
    assert prov["stack"]["id"] == kc.stack.id and prov["env"]["KGATE_TEST_TARGET_CACHE"].endswith(
        f"{kc.stack.id}/target/KGATE_TEST_TARGET_CACHE")
    man = json.loads(paths.stack_manifest(tmp_path, kc.stack.id).read_text())
    assert Stack.from_dict(man["stack"]) == kc.stack


@pytest.mark.parametrize(("setting", "cpu", "cores", "cap", "want"), [
    ("auto", False, 16, None, 14), ("auto", False, 2, None, 1), ("auto", False, 64, None, runner.GPU_WORKERS_MAX),
    ("auto", True, 2, None, 1), ("auto", True, 16, None, 4), ("auto", True, 64, None, runner.CPU_WORKERS_MAX),
    ("auto", False, 16, 1, 1), ("6", False, 16, None, 6), ("6", True, 2, 4, 4)])
def test_gate_workers(setting: str, cpu: bool, cores: int, cap: int | None, want: int) -> None:
    assert runner.resolve_workers(setting, cpu=cpu, cores=cores, cap=cap) == want


def test_gate_workers_refuse_nonsense() -> None:
    with pytest.raises(ConfigError, match="neither a number nor 'auto'"):
        runner.resolve_workers("many", cpu=False, cores=4)


def test_pick_status_names_why_an_unchanged_kernel_was_tuned_per_arm() -> None:
    """The statuses the shared cache cannot give: a kernel moved in its file (same source, another Triton key),
    the interpreter (no key) and a kernel one arm never ran; workers' answers written here."""
    def arm(keys: dict[str, str | None], picks: dict[str, list[str]]) -> dict:
        return {"tuners": [{"kernel": k, "triton_key": v} for k, v in keys.items()],
                "row_picks": {"r": {"fwd": picks}}}
    autotune = {"base": arm({"moved": "k1", "interp": None, "gone": "k3"},
                            {"moved": ["BLOCK: 64"], "interp": ["BLOCK: 16"], "gone": ["BLOCK: 32"]}),
                "cand": arm({"moved": "k2", "interp": None}, {"moved": ["BLOCK: 128"], "interp": ["BLOCK: 16"]})}
    sources = {a: {"moved": "s1", "interp": "s2", "gone": "s3"} for a in ("base", "cand")}
    got = {p["kernel"]: (p["status"], p["same"]) for p in autotune_picks("r", "fwd", autotune, sources)}
    assert got == {"moved": ("retuned", False), "interp": ("retuned", True), "gone": ("one arm", False)}
    assert autotune_diff("r", "fwd", autotune, sources) == ["moved base ['BLOCK: 64'] cand ['BLOCK: 128']"]
