#!/usr/bin/env python
"""Time to verdict: a campaign run cold, seeded and warm, stage by stage, into one JSON record.

    python scripts/time_to_verdict.py --campaign rwkv6-bwd-fusion --gpu h200 --limit-min 170 \\
        --out timing/h200.json [--profile profiles/local] [--scenarios cold,seeded,warm] [--resume] \\
        [--set target_path=<clone>]
    python scripts/render_timing.py timing/h200.json [--write README.md]

Method: every scenario runs the campaign in a fresh Snakemake workdir under ``--base`` (results,
worktrees and reports start empty), three phases in a row, each one ``snakemake`` process:

1. ``first``: the unforced run, up to its verdict (the time to the first verdict);
2. ``forced``: ``force=true`` in the same workdir, every stage the first run did not reach (with
   ``first``, the time to the full forced verdict);
3. ``rerun``: the candidate edited and the forced run again (the rerun after a candidate edit). The
   edit is a comment appended to every file the candidate overlay adds code from (a ``ref:``
   candidate: to each Python file of ``candidate.diff_paths`` in a shared clone of the ref, run as a
   ``worktree:`` candidate): the candidate id changes, so every candidate stage runs again, while its
   kernels keep their source and lines (``--edited-candidate overlay:DIR`` times an edit of your own
   instead).

The scenarios differ only in the kernel cache (the profile's ``kernel_cache``, set per scenario in a
copy of ``--profile`` under the base folder): ``cold`` starts from an empty root; ``seeded`` from an
empty root into which ``python -m kgate cache import`` put the bundle ``kgate cache export`` made of
the cold root once the cold scenario ended (autotune picks; ``--seed-kernels`` adds the compiled
kernels), or the bundle ``--seed-bundle`` names (made on another machine of the same stack);
``warm`` reuses the cold root as the cold scenario left it. Run them in the order given (warm, and
seeded without ``--seed-bundle``, need the cold one).

What is recorded per phase: the script's own wall clock, Snakemake's exit code, the verdict, and per
stage record written during the phase its status, wall time, start and end (the record's
provenance) and how its kernel cache started (``cold``/``seeded``/``warm``) and what it added;
Snakemake's log gives each job's start and finish (``snakemake_jobs``), so scheduling time shows
beside the stages' own. The record is rewritten (atomically) after every phase; a phase cut by
``--limit-min`` (its process group is sent SIGTERM) keeps the stages it finished, ``status: cut``.
``--resume`` skips phases that ended and reruns a cut one in the same workdir (Snakemake reruns
what was incomplete; the attempts are listed and their times added).

Limits: the figures are one run each, on whatever else the machine does meanwhile (the host load is
not recorded here; each record's own provenance has its host); the sdist download happens in the
first scenario's ``target`` stage (shared ``--sdist-cache`` afterwards). On CPU the stages run under
the Triton interpreter, which compiles nothing: the script runs there (CI's 2 cores) but its
cold/warm difference is a GPU figure.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from kgate import campaign as campaign_mod  # noqa: E402
from kgate import device, paths, protocol  # noqa: E402
from kgate.cache import stack as stack_mod  # noqa: E402
from kgate.records import write_json  # noqa: E402
from kgate.source import git  # noqa: E402
from kgate.testrun import parallel_compile, runner  # noqa: E402

SCHEMA = "kgate.time-to-verdict/1"
SCENARIOS = ("cold", "seeded", "warm")
PHASES = ("first", "forced", "rerun")
EDIT_MARK = "# kgate time-to-verdict: candidate edit"
_STAMP = re.compile(r"^\[(\w{3} \w{3} +\d+ \d\d:\d\d:\d\d \d{4})\]$")
_START = re.compile(r"^(?:local)?(?:rule|checkpoint) (\w+):$")
_JOBID = re.compile(r"^\s+jobid: (\d+)$")
_DONE = re.compile(r"^Finished jobid: (\d+) \(Rule: (\w+)\)$")


def utc(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def parse_utc(s: str) -> float:
    return datetime.strptime(s, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc).timestamp()


def snakemake_jobs(log_dir: Path, since: float) -> list[dict[str, Any]]:
    """Each job's rule, start and finish from the Snakemake logs written since ``since`` (local time stamps)."""
    jobs: dict[str, dict[str, Any]] = {}
    for log in sorted(log_dir.glob("*.snakemake.log")) if log_dir.is_dir() else []:
        if log.stat().st_mtime < since:
            continue
        stamp: float | None = None
        rule: str | None = None
        for line in log.read_text(errors="replace").splitlines():
            if m := _STAMP.match(line):
                stamp = time.mktime(time.strptime(m.group(1), "%a %b %d %H:%M:%S %Y"))
            elif m := _START.match(line):
                rule = m.group(1)
            elif (m := _JOBID.match(line)) and rule:
                jobs[f"{log.name}:{m.group(1)}"] = {"rule": rule, "jobid": int(m.group(1)), "started": stamp}
                rule = None
            elif m := _DONE.match(line):
                j = jobs.get(f"{log.name}:{m.group(1)}")
                if j is not None and stamp is not None:
                    j["finished"] = stamp
                    j["wall_s"] = round(stamp - j["started"], 1) if j["started"] else None
    out = [j for j in jobs.values() if j.get("started") and j["started"] >= since - 1]
    for j in out:
        j["started"] = utc(j["started"])
        j["finished"] = utc(j["finished"]) if j.get("finished") else None
    return sorted(out, key=lambda j: j["started"])


def compiled_ahead(record: dict[str, Any]) -> dict[str, Any] | None:
    """What a stage's gate runs (``data.run``, ``data.dependent``) compiled ahead (kgate.testrun.parallel_compile),
    summed over their tests: tests that did, autotuner misses, configs, deferred configs, abandoned
    compile-aheads and seconds; None when no test compiled anything ahead (a warm run, the interpreter, a
    stage without a gate run)."""
    data = record.get("data") or {}
    prefix = parallel_compile.RECORD_PREFIX
    tests = [t for key in ("run", "dependent") if isinstance(data.get(key), dict)
             for t in data[key].get("tests") or [] if t.get(f"{prefix}misses")]
    if not tests:
        return None
    total = parallel_compile.summed(tests)
    return {"tests": len(tests), **total, "wall_s": round(total["wall_s"], 1)}


def precompiled(record: dict[str, Any]) -> dict[str, Any] | None:
    """What candidate_gate's precompile worker did beside its gate run (``data.precompile``,
    kgate.measure.precompile): how it ended, its wall time, the compiles it asked for and what of them it
    compiled side by side (``ahead``: misses, configs, deferred, abandoned, seconds; None when nothing was:
    no compile slots, nothing to tune, or a record from before them); None for a stage without one or when it
    did not run."""
    pre = (record.get("data") or {}).get("precompile") or {}
    if not pre.get("ran"):
        return None
    ahead = parallel_compile.summed([pre])
    return {"ended": pre.get("ended"), "wall_s": pre.get("wall_s"),
            "compiles": sum((pre.get("compiles_by_kernel") or {}).values()),
            "ahead": ahead if ahead["misses"] else None}


def stage_rows(workdir: Path, camp: str, gpu: str, since: float) -> list[dict[str, Any]]:
    """The stage records written since ``since``: status, wall time, the kernel cache's start (provenance),
    what its gate runs compiled ahead (:func:`compiled_ahead`) and what a precompile worker beside them did
    (:func:`precompiled`)."""
    rows = []
    base = workdir / paths.results(camp, gpu)
    for rec in sorted(base.glob("*/record.json")) + sorted(base.glob("*/*/record.json")) if base.is_dir() else []:
        r = json.loads(rec.read_text())
        prov = r.get("provenance") or {}
        if not prov.get("started_utc") or parse_utc(prov["started_utc"]) < int(since):
            continue
        kc = prov.get("kernel_cache") or {}
        rows.append({"stage": r["stage"], "candidate": r.get("candidate"), "status": r["status"],
                     "wall_s": prov.get("wall_s"), "started_utc": prov.get("started_utc"),
                     "finished_utc": prov.get("finished_utc"), "cache_state": kc.get("state_at_start"),
                     "cache_added": kc.get("added"), "compiled_ahead": compiled_ahead(r),
                     "precompiled": precompiled(r)})
    order = {s: i for i, s in enumerate(("doctor", *protocol.STAGES, "report"))}
    return sorted(rows, key=lambda x: (x["started_utc"], order.get(x["stage"], 99)))


def profile_copy(src: Path, dest: Path, kernel_cache: Path) -> Path:
    """``src`` (a profile folder) copied to ``dest`` with its ``kernel_cache`` resource set to ``kernel_cache``."""
    dest.mkdir(parents=True, exist_ok=True)
    text = (src / "config.yaml").read_text()
    line = f"  - kernel_cache='{kernel_cache.resolve()}'"
    text, n = re.subn(r"^  - kernel_cache=.*$", line, text, flags=re.M)
    if n != 1:
        raise SystemExit(f"time_to_verdict: {src}/config.yaml sets no kernel_cache default resource")
    (dest / "config.yaml").write_text(text)
    return dest


def edited_candidate(camp: campaign_mod.Campaign, dest: Path) -> str:
    """A copy of the candidate with a comment appended to every Python file it adds code from: an overlay's
    folder (``overlay:``), or for a ``ref:`` candidate a checkout of the ref (``worktree:``, a ``git clone
    --shared`` of the target clone, which writes nothing into it) with the comment appended to each Python file
    of ``candidate.diff_paths`` that exists at the ref."""
    src = camp.candidate_source
    if src.kind == "ref":
        return edited_ref(camp, src.value, dest)
    if src.kind != "overlay":
        raise SystemExit(f"time_to_verdict: the campaign's candidate is a {src.kind}: pass --edited-candidate")
    from kgate.source import overlay

    folder = paths.PROJECT / src.value
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(folder, dest)
    variant = overlay.select(dest, camp.target_identity)
    files = {e[k] for e in variant.edits for k in ("create", "append") if k in e}
    for f in sorted(files):
        p = dest / f
        p.write_text(p.read_text().rstrip("\n") + f"\n{EDIT_MARK}\n")
    return f"overlay:{dest.resolve()}"


def edited_ref(camp: campaign_mod.Campaign, ref: str, dest: Path) -> str:
    """The ref checked out at ``dest`` as a worktree of a bare shared clone beside it (``<dest>.git``), as the
    target stage clones a target (``kgate.source.git``: a shallow clone's objects are borrowed, not packed)."""
    clone = camp.existing_repo_path()
    bare = dest.with_name(dest.name + ".git")
    git.clone_shared(clone, bare)
    sha = git.git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", cwd=bare, check=False).strip()
    if not sha:
        raise SystemExit(f"time_to_verdict: {ref} is no commit of {clone}")
    git.reset_worktree(bare, dest, sha)
    files = [f for f in camp.data["candidate"].get("diff_paths") or [] if f.endswith(".py") and (dest / f).is_file()]
    if not files:
        raise SystemExit(f"time_to_verdict: candidate.diff_paths names no Python file at {ref}: pass --edited-candidate")
    for f in files:
        p = dest / f
        p.write_text(p.read_text().rstrip("\n") + f"\n{EDIT_MARK}\n")
    return f"worktree:{dest.resolve()}"


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.base = Path(args.base).resolve()
        self.out = Path(args.out).resolve()
        self.deadline = time.monotonic() + args.limit_min * 60
        sets = dict(e.split("=", 1) for e in args.set)
        self.camp = campaign_mod.load(args.campaign, {k: v for k, v in sets.items() if k == "target_path"})
        here = stack_mod.detect()
        gpu = here.device_class if args.gpu == "auto" else args.gpu
        self.gpu = gpu
        old = json.loads(self.out.read_text()) if (args.resume and self.out.exists()) else None
        self.rec: dict[str, Any] = old or {
            "schema": SCHEMA, "campaign": self.camp.name, "gpu": gpu, "profile": str(args.profile),
            "started_utc": utc(time.time()), "limit_min": args.limit_min, "base": str(self.base),
            "machine": {"stack": here.as_dict(), "cores": device.usable_cores(),
                        "gate_workers_auto": runner.resolve_workers("auto", cpu=gpu == "cpu")},
            "edit": args.edited_candidate or "comment appended to the candidate's code files",
            "scenarios": {}}

    def save(self) -> None:
        write_json(self.out, self.rec)

    def root(self, scenario: str) -> Path:
        return self.base / ("kernels-cold" if scenario in ("cold", "warm") else f"kernels-{scenario}")

    def left_s(self) -> float:
        return self.deadline - time.monotonic()

    def run(self) -> int:
        for scenario in self.args.scenarios.split(","):
            if scenario not in SCENARIOS:
                raise SystemExit(f"time_to_verdict: unknown scenario {scenario!r} (known: {', '.join(SCENARIOS)})")
            sc = self.rec["scenarios"].setdefault(scenario, {"kernel_cache": str(self.root(scenario)), "phases": {}})
            if scenario == "seeded" and "seed" not in sc:
                sc["seed"] = self.seed()
                self.save()
            for phase in PHASES:
                got = sc["phases"].get(phase)
                if got and got["status"] == "done":
                    continue
                if got and got["status"] == "failed":
                    break
                if self.left_s() <= 0:
                    sc["phases"].setdefault(phase, {"status": "skipped", "why": "time limit reached"})
                    continue
                sc["phases"][phase] = self.phase(scenario, phase, got)
                sc["totals"] = totals(sc["phases"])
                self.save()
                if sc["phases"][phase]["status"] != "done":
                    break
        self.save()
        print(f"time_to_verdict: {self.out}")
        return 0

    def seed(self) -> dict[str, Any]:
        """Export the cold root's picks and import them into the seeded root (``python -m kgate cache``); with
        ``--seed-bundle`` import that bundle instead (one made on another machine of the same stack: a new node
        starting from a bundle it was given), exporting nothing."""
        given = self.args.seed_bundle
        bundle = (Path(given).resolve() if given
                  else self.base / f"seed{'-kernels' if self.args.seed_kernels else ''}.tar.gz")
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        export = [sys.executable, "-m", "kgate", "cache", "export", str(bundle), "--kernel-cache",
                  str(self.root("cold")), *(["--kernels"] if self.args.seed_kernels else [])]
        imp = [sys.executable, "-m", "kgate", "cache", "import", str(bundle), "--kernel-cache", str(self.root("seeded"))]
        out: dict[str, Any] = {"bundle": str(bundle), "given": bool(given)}
        for what, cmd in ((("import", imp),) if given else (("export", export), ("import", imp))):
            t0 = time.monotonic()
            p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=self.base)
            out[what] = {"command": cmd, "exit_code": p.returncode, "wall_s": round(time.monotonic() - t0, 1),
                         "output": (p.stdout + p.stderr).strip()[-2000:]}
            if p.returncode != 0:
                break
        out["bundle_bytes"] = bundle.stat().st_size if bundle.exists() else None
        return out

    def phase(self, scenario: str, phase: str, old: dict[str, Any] | None) -> dict[str, Any]:
        wd = self.base / scenario
        wd.mkdir(parents=True, exist_ok=True)
        prof = profile_copy(REPO / self.args.profile, self.base / f"profile-{scenario}", self.root(scenario))
        config = [f"campaign={self.args.campaign}", f"gpu={self.gpu}",
                  f"sdist_cache={Path(self.args.sdist_cache).resolve()}", *self.args.set]
        if phase in ("forced", "rerun"):
            config.append("force=true")
        if phase == "rerun":
            config.append(f"candidate={self.args.edited_candidate or edited_candidate(self.camp, self.base / 'edited')}")
        cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(wd), "--profile", str(prof),
               *self.args.snakemake_arg, "--config", *config]
        attempts = list((old or {}).get("attempts", []))
        start = time.time()
        log = self.base / f"{scenario}-{phase}-{len(attempts) + 1}.log"
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
        print(f"time_to_verdict: {scenario} {phase}: {' '.join(cmd)}", flush=True)
        with log.open("w") as fh:
            proc = subprocess.Popen(cmd, cwd=wd, stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True)
            timed_out = False
            try:
                code: int | None = proc.wait(timeout=max(self.left_s(), 1))
            except subprocess.TimeoutExpired:
                timed_out = True
                os.killpg(proc.pid, signal.SIGTERM)  # Snakemake ends its jobs on SIGTERM
                try:
                    code = proc.wait(timeout=120)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    code = proc.wait()
        wall = time.time() - start
        attempts.append({"started_utc": utc(start), "wall_s": round(wall, 1), "exit_code": code,
                         "timed_out": timed_out, "log": str(log)})
        stages = [*(old or {}).get("stages", []), *stage_rows(wd, self.camp.name, self.gpu, start)]
        verdict_file = wd / paths.verdict_file(self.camp.name, self.gpu)
        verdict = json.loads(verdict_file.read_text()) if verdict_file.exists() and code == 0 else None
        return {"status": "cut" if timed_out else ("done" if code == 0 else "failed"), "command": cmd,
                "attempts": attempts, "wall_s": round(sum(a["wall_s"] for a in attempts), 1),
                "verdict": {"verdict": verdict.get("verdict"), "sentence": verdict.get("sentence")} if verdict else None,
                "stages": stages,
                "stage_wall_s": round(sum(s["wall_s"] or 0 for s in stages), 1),
                "snakemake_jobs": [*(old or {}).get("snakemake_jobs", []),
                                   *snakemake_jobs(wd / ".snakemake" / "log", start)]}


def totals(phases: dict[str, dict[str, Any]]) -> dict[str, float | None]:
    """The three figures of a scenario; None where a phase it needs did not end."""
    def done(p: str) -> float | None:
        ph = phases.get(p) or {}
        return ph.get("wall_s") if ph.get("status") == "done" else None

    first, forced, rerun = done("first"), done("forced"), done("rerun")
    return {"first_verdict_s": first,
            "full_forced_verdict_s": round(first + forced, 1) if first is not None and forced is not None else None,
            "rerun_after_edit_s": rerun}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--campaign", default="rwkv6-bwd-fusion", help="campaign name or file (default: the default campaign)")
    p.add_argument("--gpu", default="auto", help="device class (default: this machine's)")
    p.add_argument("--profile", default="profiles/local", help="Snakemake profile, relative to the kgate checkout")
    p.add_argument("--scenarios", default=",".join(SCENARIOS), help="comma-separated, in order (cold first)")
    p.add_argument("--base", default="work/time-to-verdict", help="folder of the scenarios' workdirs and caches")
    p.add_argument("--out", default="work/time-to-verdict/record.json", help="the JSON record (kgate.time-to-verdict/1)")
    p.add_argument("--limit-min", type=float, default=170.0, help="wall-clock limit of the whole script (minutes)")
    p.add_argument("--sdist-cache", default=str(paths.PROJECT / "work" / "cache" / "sdists"),
                   help="pinned sdists, shared by the scenarios")
    p.add_argument("--seed-kernels", action="store_true", help="the seeded bundle carries compiled kernels too")
    p.add_argument("--seed-bundle", default=None,
                   help="the seeded scenario imports this bundle (kgate cache export, same stack) instead of one "
                        "exported from the cold scenario, which it then does not need")
    p.add_argument("--edited-candidate", default=None,
                   help="the rerun's candidate (overlay:<dir>, ref:<ref>, worktree:<path>) instead of the comment edit")
    p.add_argument("--snakemake-arg", action="append", default=[], help="an extra Snakemake argument (repeatable)")
    p.add_argument("--resume", action="store_true", help="keep the phases --out holds that ended; rerun cut ones")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="an extra Snakemake --config entry for every phase, e.g. target_path=<clone> (repeatable)")
    return p


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    for entry in args.set:
        key = entry.partition("=")[0]
        if "=" not in entry or not key or key in {"campaign", "gpu", "sdist_cache", "force", "candidate"}:
            p.error(f"--set {entry!r}: KEY=VALUE, and not a key the script sets itself "
                    "(campaign, gpu, sdist_cache, force, candidate)")
    if args.seed_bundle and not Path(args.seed_bundle).is_file():
        p.error(f"--seed-bundle {args.seed_bundle}: no such file")
    base = Path(args.base)
    if base.exists() and not args.resume:
        raise SystemExit(f"time_to_verdict: {base} exists; pass --resume to continue it, or remove it for a fresh run")
    base.mkdir(parents=True, exist_ok=True)
    return Bench(args).run()


if __name__ == "__main__":
    sys.exit(main())
