"""The campaign ``kgate init`` writes for a change, and the one-line account of each decision.

Method (docs/init.md): read the change (``kgate.init.change``), split it by
kind (``kgate.init.split``), find the gate (``kgate.init.gate``), refuse or
route edits of the correctness contract as ``--test-edits`` says, infer the
mechanism from the Triton kernels the change touches
(``kgate.init.kernels``), take rows and inputs from the target's benchmark
registry when an adapter reads it (``kgate.init.registry``), and collect the
gate once to decide the CPU selection. Everything init cannot decide is a
value starting with ``kgate.campaign.TODO_MARK``, which the campaign loader
refuses naming its key; everything it decided is a line the user confirms.
"""

from __future__ import annotations

import fnmatch
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kgate import paths
from kgate.campaign import TODO_MARK
from kgate.errors import ConfigError, KgateError
from kgate.init import bench_scripts, split
from kgate.init import gate as gate_mod
from kgate.init import kernels as kernels_mod
from kgate.init import registry as registry_mod
from kgate.init.change import Change, Trees
from kgate.init.pyindex import PyIndex, import_roots
from kgate.source import git, numerics
from kgate.testrun.dependents import helper_tests

#: what --test-edits accepts: refuse (default), fixture (freeze the edited tests at BENCH_BASE), omit (leave them out)
TEST_EDITS = ("refuse", "fixture", "omit")
#: pytest arguments that drop the target's addopts (options of plugins the gate's environment does not have)
NO_ADDOPTS = ("-o", "addopts=")
_TRAILER = re.compile(r"^[A-Za-z-]+-by:|^Signed-off-by:|^Change-Id:")
_CALLABLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*:[A-Za-z_][A-Za-z0-9_]*$")


def todo(what: str) -> str:
    """A value the user must fill in, refused by the campaign loader naming its key."""
    return f"{TODO_MARK}: {what}"


@dataclass(frozen=True, slots=True)
class Options:
    """The arguments of ``kgate init``."""

    target: str
    base: str
    head: str
    name: str
    op: str | None = None
    test_edits: str = "refuse"
    helper: str | None = None
    #: the gate's test files as the user names them (--gate); None: the covering tests init finds
    gate: tuple[str, ...] | None = None
    #: gate.select.cpu as the user gives it (``all``: null); None: decided from a collection of the gate
    cpu_select: str | None = None
    root: Path = paths.PROJECT


@dataclass(frozen=True, slots=True)
class Plan:
    """The campaign's data, the fixture's edits, the input generator's text, and the account of it."""

    data: dict[str, Any]
    fixture: tuple[split.Edit, ...]
    inputs: str
    lines: tuple[tuple[str, str], ...]
    kernels_dir: Path
    campaign_file: Path


def target_path(given: str, resolved: Path) -> str:
    """``target.repo.path`` as the user gave it: an absolute path stays absolute; a relative one (to the user's
    directory) is written relative to the kgate checkout, as the campaign loader reads it (``../fla`` beside it)."""
    if Path(given).expanduser().is_absolute():
        return str(resolved)
    return os.path.relpath(resolved, paths.PROJECT.resolve())


def kgate_relative(path: Path) -> str:
    """A path as a campaign names kgate's files: relative to the kgate checkout when inside it, else absolute."""
    path = path.resolve()
    try:
        return str(path.relative_to(paths.PROJECT.resolve()))
    except ValueError:
        return str(path)


def _few(items: list[str] | tuple[str, ...], n: int = 8) -> str:
    """At most ``n`` items of a list for a one-line account, and how many more there are."""
    items = list(items)
    return ", ".join(items[:n]) + (f" and {len(items) - n} more" if len(items) > n else "")


def _rx(names: list[str] | tuple[str, ...]) -> str:
    names = sorted(names)
    return f"^{names[0]}$" if len(names) == 1 else f"^({'|'.join(names)})$"


def _hypothesis(change: Change) -> str | None:
    msgs = change.messages()
    if not msgs:
        return None
    if len(msgs) == 1:
        kept = [ln for ln in msgs[0].splitlines() if not _TRAILER.match(ln.strip())]
        text = " ".join(" ".join(kept).split())
    else:
        text = "; ".join(m.splitlines()[0].strip() for m in msgs)
    return text[:1200]


class _Account(list[tuple[str, str]]):
    """The lines init prints and writes at the top of the campaign, in order: (tag, text)."""

    def add(self, tag: str, text: str) -> None:
        self.append((tag, text))


def compose(opts: Options, change: Change, trees: Trees) -> Plan:
    """Everything the written campaign holds (module docstring)."""
    acc = _Account()
    base_files = frozenset(git.git("ls-tree", "-r", "--name-only", change.base, cwd=change.target).splitlines())
    head_name = change.candidate_value
    acc.add("decided", f"target {change.target} at base {change.base}; head {change.head_kind}:{head_name}"
            + (f" ({change.head_sha[:12]})" if change.head_sha and head_name != change.head_sha else ""))

    sources: list[str] = []
    tests: list[split.TestChange] = []
    for f in change.files:
        kind = split.kind_of(f.path)
        if kind in ("test", "test_support"):
            tests.append(split.analyse_test(f.path, f.status, change.base_bytes(f.path), change.head_bytes(f.path),
                                            base_files))
        elif kind == "source":
            sources.append(f.path)
        else:
            acc.add("left out", f"{f.path} ({split.LEFT_OUT[kind]})")
    additions = [t for t in tests if t.addition]
    contract = {t.path: t.why for t in tests if not t.addition}

    index = PyIndex.of(trees.head, import_roots(PyIndex.of(trees.head).files, sources))
    conv, helper = _helper(opts, gate_mod.conventions(base_files), trees)

    def gate_for(srcs: list[str]) -> gate_mod.Gate:
        covering, how = _covering(index, base_files, srcs, helper, trees, acc, opts.gate)
        appended = [t.path for t in additions if split.is_test_module(t.path) and change.status(t.path) == "M"]
        new = [t.path for t in additions if split.is_test_module(t.path) and change.status(t.path) == "A"]
        touched = [e.path for t in additions for e in t.edits]
        return gate_mod.compose(index, base_files, srcs, covering, how, appended, new, touched)

    g = gate_for(sources)
    for ref, test in g.references.items():
        contract[ref] = f"edits a reference implementation the gate imports ({test})"
    fixture_edits = [e for t in additions for e in t.edits]
    sources = _route_contract(opts, change, contract, sources, fixture_edits, acc)
    if not sources:
        raise ConfigError("the change has no source file to validate (only tests, documentation or configuration): "
                          "nothing can be a candidate")
    if g.references:
        g = gate_for(sources)
    for t in additions:
        acc.add("decided", f"fixture: {t.path}: {t.why}")
    for s in sources:
        found = numerics.diff(change.base_text(s), change.head_text(s), s)
        for msg in found.flagged:
            acc.add("warning", f"{msg}: candidate_build's numeric_flags gate fails on a changed numeric setting")
        for msg in found.notes:
            acc.add("decided", f"{msg}: numeric_flags passes it")

    data: dict[str, Any] = {"schema": 1, "name": opts.name}
    hyp = _hypothesis(change)
    data["hypothesis"] = hyp if hyp else todo("one paragraph: what the change makes faster and why")
    if hyp:
        acc.add("decided", "hypothesis: the commit message(s) of base..head (restate it as a claim if it is not one)")
    data["notes"] = [f"Written by kgate init from {change.target}, base {change.base}, head {change.head}: "
                     f"{len(change.files)} changed file(s), {len(fixture_edits)} fixture edit(s), "
                     f"{len(sources)} candidate file(s)."]
    data["target"] = {"repo": {"path": target_path(opts.target, change.target), "baseline": change.base}}
    if index.import_roots != (".",):
        data["target"]["python_path"] = list(index.import_roots)
        acc.add("decided", f"target.python_path {list(index.import_roots)} (the changed packages' import root)")
    data["gate"] = _gate_section(g, conv, acc)
    data["fixture"] = _fixture_section(opts, g, fixture_edits)
    data["frozen"] = list(g.frozen)
    if g.frozen:
        acc.add("decided", f"frozen: {_few(g.frozen)} (conftests and what the gate imports, besides the gate's "
                           "own files, which are always frozen)")
    data["candidate"] = {change.head_kind: head_name, "diff_paths": list(sources), "allowed_paths": list(sources)}
    acc.add("decided", f"candidate {change.head_kind}:{data['candidate'][change.head_kind]} restricted to "
                       f"{_few(sources)} (candidate.diff_paths, candidate.allowed_paths)")
    env = next((c.values["env"] for c in conv if "env" in c.values), None)
    if env:
        data["env"] = env
    kern = kernels_mod.infer(change, sources, index)
    measure, extra, inputs = _measure(opts, trees, index, sources, kern, data["target"].get("python_path", ["."]), acc)
    data["measure"] = measure
    data.update(extra)
    data["model"] = {"none": todo("the end-to-end workload (model.config_class and model.model_class, or builder; "
                                  "a patch that puts the target's kernels in) or the reason there is none")}
    _cpu_selection(opts, trees, data, acc)
    return Plan(data=data, fixture=tuple(fixture_edits), inputs=inputs, lines=tuple(acc),
                kernels_dir=opts.root / "kernels" / opts.name,
                campaign_file=opts.root / "config" / "campaigns" / f"{opts.name}.yaml")


def _helper(opts: Options, conv: list[gate_mod.Convention], trees: Trees
            ) -> tuple[list[gate_mod.Convention], str | None]:
    """The conventions kept and the dependent-test helper: ``--dependent-helper`` (a path, or ``none``), else a
    convention's."""
    helpers = [c for c in conv if "dependent_tests" in c.values.get("gate", {})]
    if opts.helper is None:
        return conv, helpers[0].values["gate"]["dependent_tests"]["helper"] if helpers else None
    kept = [c for c in conv if c not in helpers]
    if opts.helper == "none":
        return kept, None
    if not (trees.head / opts.helper).is_file():
        raise ConfigError(f"--dependent-helper: '{opts.helper}' is not a file of the target at the head")
    return [*kept, gate_mod.Convention("dependent-helper", opts.helper,
                                       {"gate": {"dependent_tests": {"helper": opts.helper}}},
                                       f"the dependent-test helper {opts.helper} (--dependent-helper)")], opts.helper


def _covering(index: PyIndex, base_files: frozenset[str], sources: list[str], helper: str | None, trees: Trees,
              acc: _Account, named: tuple[str, ...] | None = None) -> tuple[list[str], str]:
    if named is not None:
        missing = [t for t in named if t not in base_files or split.kind_of(t) != "test"]
        if missing:
            raise ConfigError(f"--gate: {', '.join(missing)} is not a test file of the base commit")
        return list(named), "--gate"
    if helper:
        try:
            found = helper_tests(helper, trees.head, sources)
            kept = [t for t in found if t in base_files and split.kind_of(t) == "test"]
            return kept, f"the target's dependent-test helper {helper}"
        except KgateError as exc:
            acc.add("warning", f"{exc}; the gate comes from the tests' imports instead")
    steps = gate_mod.covering_steps(index, base_files, sources)
    covering = list(steps)
    direct = [t for t, n in steps.items() if n == 1]
    how = "the tests whose imports reach the changed files"
    if direct and len(direct) < len(covering):
        verb = "imports" if len(direct) == 1 else "import"
        how += (f"; {len(direct)} of them {verb} one directly ({_few(direct)}), the other "
                f"{len(covering) - len(direct)} through other modules: --gate narrows the gate")
    return covering, how


def _route_contract(opts: Options, change: Change, contract: dict[str, str], sources: list[str],
                    fixture_edits: list[split.Edit], acc: _Account) -> list[str]:
    """Refuse edits of the contract, or put them into the fixture or leave them out (``--test-edits``)."""
    if not contract:
        return sources
    listed = "; ".join(f"{p} {why}" for p, why in sorted(contract.items()))
    if opts.test_edits == "refuse":
        raise ConfigError(f"the change edits the correctness contract, which cannot be part of a candidate: {listed} "
                          "(pass --test-edits fixture to freeze the edited version at BENCH_BASE, or --test-edits omit "
                          "to leave it out)")
    for path, why in sorted(contract.items()):
        if opts.test_edits == "omit":
            acc.add("left out", f"{path} ({why}; --test-edits omit)")
            continue
        base, head = change.base_bytes(path), change.head_bytes(path)
        if head is None:
            raise ConfigError(f"--test-edits fixture: {path} is deleted by the change, which an overlay cannot do")
        if base is None:
            fixture_edits.append(split.Edit(path, "create", content=head))
        else:
            try:
                edits = split.anchored_edits(path, base.decode("utf-8"), head.decode("utf-8"))
            except UnicodeDecodeError:
                edits = None
            if edits is None:
                raise ConfigError(f"--test-edits fixture: {path} cannot be written as overlay edits (binary, or no "
                                  "unique anchor)")
            fixture_edits.extend(edits)
        acc.add("decided", f"fixture: {path} ({why}; --test-edits fixture: the baseline must pass the edited "
                           "version, and fixture_freeze fails if it loses a test id)")
    return [s for s in sources if s not in contract]


def _gate_section(g: gate_mod.Gate, conv: list[gate_mod.Convention], acc: _Account) -> dict[str, Any]:
    sec: dict[str, Any] = {}
    if g.tests:
        sec["tests"] = list(g.tests)
        acc.add("decided", f"gate.tests {_few(g.tests)} ({len(g.covering)} covering file(s): {g.how})")
    else:
        sec["tests"] = todo("no test file of the base covers the changed files: name the tests the baseline must "
                            "pass (and that the candidate's path runs)")
    sec["select"] = {"cpu": None, "gpu": None}
    if g.pytest_args:
        sec["pytest_args"] = list(g.pytest_args)
        acc.add("decided", f"gate.pytest_args {' '.join(g.pytest_args)} (the new test files' folder, narrowed to "
                           "the gate's files)")
    for c in conv:
        for k, v in c.values.get("gate", {}).items():
            sec[k] = v
        acc.add("decided", f"{c.why} (marker {c.marker})")
    return sec


def _fixture_section(opts: Options, g: gate_mod.Gate, edits: list[split.Edit]) -> dict[str, Any]:
    if not edits:
        return {"overlay": todo("the change adds no test: write a fixture overlay (kgate/schemas/overlay.schema.yaml) "
                                "whose cases cover the changed code, and name its folder here")}
    sec: dict[str, Any] = {"overlay": kgate_relative(opts.root / "kernels" / opts.name / "fixture")}
    folders = [t.rstrip("/") if not t.endswith(".py") else t.rpartition("/")[0] for t in g.tests]
    allowed = [f"{f}/**" if f not in ("", ".") else "*" for f in folders]
    if not all(any(fnmatch.fnmatchcase(e.path, a) for a in allowed) for e in edits):
        extra = [f"{e.path.rpartition('/')[0]}/**" if "/" in e.path else e.path for e in edits]
        sec["test_paths"] = sorted(set(allowed) | set(extra))
    return sec


def _choose_op(opts: Options, reg: registry_mod.Registry | None, index: PyIndex, sources: list[str],
               acc: _Account) -> tuple[str | None, registry_mod.RegistryOp | None]:
    if opts.op:
        if not _CALLABLE.match(opts.op):
            raise ConfigError(f"--op: expected 'module.path:function', got '{opts.op}'")
        return opts.op, next((o for o in (reg.ops.values() if reg else ()) if o.callable == opts.op), None)
    if reg is None:
        return None, None
    src = set(sources)
    scored: dict[str, list[registry_mod.RegistryOp]] = {"defines": [], "reaches": []}
    for o in reg.ops.values():
        files = index.resolve(o.module, o.callable.partition(":")[2])
        if files & src:
            scored["defines"].append(o)
        elif any(index.reaches(f, src) for f in files):
            scored["reaches"].append(o)
    for how in ("defines", "reaches"):
        if len(scored[how]) == 1:
            return scored[how][0].callable, scored[how][0]
        if scored[how]:
            acc.add("warning", f"registry ops whose code the change {'defines' if how == 'defines' else 'reaches'}: "
                               f"{', '.join(o.name for o in scored[how][:8])}; name one with --op")
            return None, None
    return None, None


def _measure(opts: Options, trees: Trees, index: PyIndex, sources: list[str], kern: kernels_mod.Kernels,
             python_path: list[str], acc: _Account) -> tuple[dict[str, Any], dict[str, Any], str]:
    """The measure section, the sections that follow from it (profile, bench, ncu modes and rows), the inputs file."""
    adapter = registry_mod.detect(trees.base)
    reg = None
    if adapter is not None:
        try:
            reg = adapter.read(trees.base, tuple(python_path))
        except KgateError as exc:
            acc.add("warning", f"{exc}: no rows from it")
    fn, op = _choose_op(opts, reg, index, sources, acc)
    inputs_file = opts.root / "kernels" / opts.name / "bench_inputs.py"
    m: dict[str, Any] = {"callable": fn or todo("the public endpoint to time, module.path:function (or pass --op)")}
    extra: dict[str, Any] = {}
    if reg is not None and op is not None and adapter is not None and op.rows:
        m["inputs"] = kgate_relative(inputs_file)
        m["registry"] = {"op": reg.entry(op), "format": reg.format}
        inputs = adapter.inputs_source(reg, op)
        names = [r["name"] for r in op.rows]
        acc.add("decided", f"measure.callable {op.callable}, rows and inputs from the registry entry '{op.name}' of "
                           f"{reg.file} ({reg.format}): {len(names)} row(s) at the base ({_few(names)})")
        m["cpu"] = {"rows": adapter.cpu_rows(op)}
        acc.add("decided", f"measure.cpu.rows {m['cpu']['rows']} (tiny shapes for the interpreter)")
        ncu_rows = list(dict.fromkeys([names[0], names[-1]]))
        if op.skip_backward:
            extra["profile"] = {"mode": "fwd"}
            extra["bench"] = {"modes": {"gated": "fwd", "controls": "fwd"}}
            acc.add("decided", "profile, bench and ncu time the forward only (the registry entry skips backward)")
    else:
        m["inputs"] = todo(f"write make_inputs(row, *, device, dtype, seed) in {kgate_relative(inputs_file)} (a "
                           "template is there) and name that file here")
        inputs = _INPUTS_TEMPLATE.format(callable=fn or "the timed op")
        m["rows"] = todo("the GPU rows: a list of {name, <shape values make_inputs reads>}")
        m["cpu"] = {"rows": todo("tiny rows for the interpreter, same keys as measure.rows")}
        ncu_rows = None
        script = bench_scripts.read(trees.base, sources) if op is None else None
        yours = ("the inputs are yours (rows from its benchmark script, below)"
                 if isinstance(script, bench_scripts.ScriptRows) else "rows and inputs are yours")
        if reg is None:
            acc.add("decided", "no benchmark registry of a known format at the base (formats: "
                               f"{', '.join(registry_mod.ADAPTERS)}): {yours}")
        elif op is None and opts.op:
            acc.add("decided", f"--op {opts.op} is no entry of {reg.file} at the base: {yours}")
        elif op is None:
            acc.add("decided", f"no entry of {reg.file} at the base was chosen for the changed code (--op names "
                               f"one): {yours}")
        else:
            acc.add("decided", f"the registry entry '{op.name}' of {reg.file} has no row at the base: rows are yours")
        if isinstance(script, bench_scripts.ScriptRows):
            m["rows"] = [dict(r) for r in script.rows]
            names = [r["name"] for r in script.rows]
            ncu_rows = list(dict.fromkeys([names[0], names[-1]]))
            acc.add("decided", f"measure.rows from the target's benchmark script {script.file} "
                               f"({bench_scripts.FORMAT}; shapes only, swept over {script.x_name}): {len(names)} "
                               f"row(s) ({_few(names)}): confirm they are the shapes the change claims")
            for note in script.conditional:
                acc.add("warning", f"{script.file}: {note}: the script sizes its sweep by the device")
            if script.left_out:
                acc.add("left out", f"{script.file}: values that are no numbers, not in the rows: "
                                    f"{_few(list(script.left_out))}")
        elif isinstance(script, str):
            acc.add("warning", script)
    m["bar"] = todo("the speedup the change claims on the equal-weight geomean of the gated rows (> 1, e.g. 1.1)")
    mech, kernels_key = _mechanism(kern, acc)
    if kernels_key:
        m["kernels"] = kernels_key
    m["mechanism"] = mech
    extra["ncu"] = _ncu(kern, ncu_rows, op)
    return m, extra, inputs


def _mechanism(kern: kernels_mod.Kernels, acc: _Account) -> tuple[Any, dict[str, str]]:
    mech: dict[str, Any] = {}
    for name, why in kern.changed.items():
        acc.add("decided", f"mechanism speeds_up {name} ({kern.files.get(name, '?')}: {why}): confirm")
    if kern.changed:
        mech["speeds_up"] = [{"kernels": f"^{n}$",
                              "bytes": todo(f"global-memory bytes {n} must move per call, over the row's values "
                                            "and dtype_bytes"),
                              "flops": todo(f"floating-point operations of {n} per call (0 when memory bounds it)")}
                             for n in kern.changed]
    if kern.removed:
        mech["removes"] = {"kernels": _rx(kern.removed),
                           "temporaries": todo("the temporaries the change removes ({name, bytes, accesses}), or []")}
        acc.add("decided", f"mechanism removes {', '.join(kern.removed)} (kernels of the base the head no longer has): "
                           "confirm")
    key: dict[str, str] = {}
    if kern.added:
        key["replacement"] = _rx(kern.added)
        acc.add("decided", f"measure.kernels.replacement {', '.join(kern.added)} (kernels only the head has): confirm")
        if kern.removed:
            key["replaced"] = _rx([*kern.removed, *kern.changed])
    if not mech:
        seen = f"new kernels {', '.join(kern.added)}" if kern.added else "no Triton kernel changed"
        return todo(f"{seen}: choose removes, speeds_up or declared (docs/measurement.md)"), key
    return mech, key


def _ncu(kern: kernels_mod.Kernels, rows: list[str] | None, op: registry_mod.RegistryOp | None) -> dict[str, Any]:
    base = [*kern.changed, *kern.removed]
    cand = [*kern.changed, *kern.added]
    sec: dict[str, Any] = {"rows": rows or todo("one to three row names to profile with Nsight Compute")}
    if base:
        sec["kernels"] = {"baseline": _rx(base), "candidate": _rx(cand or base)}
    else:
        sec["kernels"] = todo("{baseline: <regex>, candidate: <regex>}: the kernels to compare")
    if op is not None and op.skip_backward:
        sec["mode"] = "fwd"
    return sec


def _cpu_selection(opts: Options, trees: Trees, data: dict[str, Any], acc: _Account) -> None:
    g = data["gate"]
    if opts.cpu_select is not None:
        g["select"]["cpu"] = None if opts.cpu_select == "all" else opts.cpu_select
        shown = "null (every test)" if g["select"]["cpu"] is None else repr(g["select"]["cpu"])
        acc.add("decided", f"gate.select.cpu {shown} (--cpu-select)")
        return
    if not isinstance(g["tests"], list):
        g["select"]["cpu"] = todo("a -k expression of tiny cases that fit the interpreter (or null for all)")
        return
    def collect(args: list[str], tag: str) -> gate_mod.Collected:
        return gate_mod.collect(trees.head, opts.root / "work" / "init" / opts.name / tag, tuple(g["tests"]),
                                tuple(args), tuple(data["target"].get("python_path", ["."])), g.get("cpu_setup"),
                                tuple(g.get("forbid_env", [])))

    got = collect(list(g.get("pytest_args", [])), "collect")
    if got.usage_error:
        # the target's pytest configuration (addopts) names a plugin's options that this environment lacks
        retry = collect([*g.get("pytest_args", []), *NO_ADDOPTS], "collect-no-addopts")
        if retry.usage_error is None:
            # past the usage error: without the addopts pytest collects (what it finds there, collection
            # errors included, is the gate's own and said below)
            g["pytest_args"] = [*g.get("pytest_args", []), *NO_ADDOPTS]
            acc.add("decided", f"gate.pytest_args {' '.join(NO_ADDOPTS)}: the target's pytest addopts fail here "
                               f"({got.usage_error}); the gate runs without them, the same in every arm")
            got = retry
    if got.problem is None and 0 < len(got.ids) <= gate_mod.CPU_ALL_MAX:
        acc.add("decided", f"gate.select.cpu null: all {len(got.ids)} collected test(s) run under the interpreter "
                           "(a count, not a cost: narrow it if they are slow)")
        return
    why = got.problem or f"{len(got.ids)} tests collected at the head"
    g["select"]["cpu"] = todo(f"{why}: a -k expression of tiny cases that fit the interpreter on CPU (null: all)")


_INPUTS_TEMPLATE = '''"""Inputs of {callable} for kgate's timed stages: a template written by ``kgate init``, to fill in.

``make_inputs(row, *, device, dtype, seed)`` returns ``(args, kwargs)`` for the timed op on one row (a row of
the campaign's ``measure.rows`` or ``measure.cpu.rows``: its name and the shape values you give it). Draw every
value from a ``torch.Generator`` on ``device`` seeded with ``seed``, so both arms get bit-identical tensors
(kgate hashes them); set ``requires_grad`` on the tensors the backward differentiates. Examples:
kernels/liger_layer_norm_rows/bench_inputs.py, kernels/rwkv6_bwd_fused/bench_inputs.py.
"""

from __future__ import annotations

from typing import Any

import torch


def make_inputs(row: dict[str, Any], *, device: torch.device, dtype: torch.dtype,
                seed: int) -> tuple[tuple[Any, ...], dict[str, Any]]:
    raise NotImplementedError("written by kgate init: write make_inputs for {callable}")
'''
