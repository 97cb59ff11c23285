"""What a measurement measures: the rows and the campaign's ``measure`` section, resolved.

A :class:`Row` is one benchmark shape (a name, a kind, the values handed to the campaign's
``make_inputs``); :class:`MeasureSpec` (:func:`load_spec`) is the ``measure`` (+ ``profile``,
``bench``) sections for one device kind: the callable, the input generator file, the rows, the
kernel-name regexes and the temporaries the hypothesis removes. Every regex and byte expression
is checked when the spec is loaded, and ``kgate.campaign_checks`` loads it for both device kinds
when the campaign is loaded, so a bad campaign fails at DAG build. :func:`dispatch_rows` are the
``dispatch`` section's comparison rows (candidate_gate's output comparison).
:func:`eval_expression` evaluates ``temporaries[].bytes`` (numbers, row variables, + - * / // % **
and parentheses, nothing else). docs/measurement.md states the rules and their limits.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kgate import paths
from kgate.campaign import Campaign
from kgate.errors import ConfigError
from kgate.hashing import sha256_file
from kgate.measure.mechanism import DTYPE_BYTES, Mechanism, Temporary

CPU_TIMING_NOTE = "CPU timings are not meaningful"


# rows and expressions


@dataclass(frozen=True, slots=True)
class Row:
    """One benchmark row: a name, a kind (dense, varlen, ...) and the values handed to ``make_inputs``."""

    name: str
    kind: str
    values: dict[str, Any]

    def variables(self) -> dict[str, float]:
        """Numeric scalar values, the names usable in ``temporaries[].bytes`` expressions."""
        return {k: v for k, v in self.values.items()
                if isinstance(v, (int, float)) and not isinstance(v, bool)}

    def klass(self, key: str) -> Any:
        return self.values.get(key)

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "values": self.values}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Row:
        return cls(name=d["name"], kind=d["kind"], values=dict(d["values"]))


def row_from_spec(spec: dict[str, Any], source: str) -> Row:
    if "name" not in spec:
        raise ConfigError(f"{source}: every row needs a name (got {spec})")
    values = {k: v for k, v in spec.items() if k != "kind"}
    return Row(name=str(spec["name"]), kind=str(spec.get("kind", "dense")), values=values)


_BINOPS = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
           ast.Div: lambda a, b: a / b, ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b,
           ast.Pow: lambda a, b: a ** b}


def eval_expression(expr: str | int | float, variables: dict[str, float], key: str) -> float:
    """Evaluate an arithmetic expression over row variables (``B*T*H*D*4``).

    Only numbers, row variable names, + - * / // % ** and parentheses are
    allowed; anything else is a ``ConfigError`` naming ``key``.
    """
    if isinstance(expr, (int, float)) and not isinstance(expr, bool):
        return float(expr)
    try:
        tree = ast.parse(str(expr), mode="eval")
    except SyntaxError as exc:
        raise ConfigError(f"key '{key}': '{expr}' is not an arithmetic expression ({exc.msg})") from exc

    def walk(node: ast.AST) -> float:
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
            return float(node.value)
        if isinstance(node, ast.Name):
            if node.id not in variables:
                raise ConfigError(f"key '{key}': '{expr}' uses '{node.id}', which the row does not define "
                                  f"(row variables: {', '.join(sorted(variables))})")
            return float(variables[node.id])
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            return float(_BINOPS[type(node.op)](walk(node.left), walk(node.right)))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            value = walk(node.operand)
            return -value if isinstance(node.op, ast.USub) else value
        raise ConfigError(f"key '{key}': '{expr}' may only use numbers, row variables and + - * / // % **")

    return walk(tree)


def compile_regex(pattern: str | None, key: str) -> re.Pattern[str] | None:
    if pattern is None:
        return None
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise ConfigError(f"key '{key}': '{pattern}' is not a regular expression ({exc})") from exc


def matching(names: dict[str, Any], rx: re.Pattern[str] | None) -> dict[str, Any]:
    """The entries of a kernel table whose names match ``rx`` (``re.search``)."""
    if rx is None:
        return {}
    return {k: v for k, v in names.items() if rx.search(k)}


# the campaign's measure section


@dataclass(frozen=True, slots=True)
class MeasureSpec:
    """The resolved ``measure`` (+ ``profile``, ``bench``) sections for one device kind."""

    campaign: str
    cpu: bool
    callable: str
    inputs: Path
    dtype: str
    seed: int
    differentiate: tuple[int, ...]
    class_key: str | None
    classes: tuple[Any, ...]
    bar: float
    registry: str | None
    registry_format: str | None
    explicit_rows: tuple[Row, ...]
    mechanism: Mechanism
    replaced: str | None
    replacement: str | None
    dispatch_of: str | None
    writes_inputs: bool
    known_classes: tuple[str, ...]
    profile: dict[str, Any]
    bench: dict[str, Any]
    cpu_settings: dict[str, Any]
    cpu_setup: Path | None
    env_record: tuple[str, ...]

    @property
    def gated_mode(self) -> str:
        """The call bench times for gated rows (``bench.modes.gated``, default fwdbwd): the call the bar judges."""
        return (self.bench.get("modes") or {}).get("gated") or "fwdbwd"

    @property
    def control_mode(self) -> str:
        """The call bench times for control rows (``bench.modes.controls``, default fwd)."""
        return (self.bench.get("modes") or {}).get("controls") or "fwd"

    def profiled_call(self, mode: str | None) -> str:
        """The call a profiler runs: its section's ``mode`` when set, else the call the bar judges
        (``bench.modes.gated``), so a forward-only bar is explained by the forward's kernels."""
        return mode or self.gated_mode

    @property
    def profile_mode(self) -> str:
        """The call profile_baseline and profile_candidate profile: ``profile.mode``, else bench's gated mode.

        The plausibility bound is a best case for the endpoint the bar judges, so both must be the same call;
        campaign checks refuse a ``profile.mode`` that differs from ``bench.modes.gated``."""
        return self.profiled_call(self.profile.get("mode"))

    @property
    def removed(self) -> str | None:
        """The ``removes`` kind's kernels (None when the mechanism removes nothing)."""
        return self.mechanism.removed

    @property
    def temporaries(self) -> tuple[Temporary, ...]:
        return self.mechanism.temporaries

    @property
    def removed_rx(self) -> re.Pattern[str] | None:
        return compile_regex(self.removed, "measure.mechanism.removes.kernels")

    @property
    def replaced_rx(self) -> re.Pattern[str]:
        rx = compile_regex(self.replaced or self.mechanism.named(), "measure.kernels.replaced")
        assert rx is not None
        return rx

    @property
    def replacement_rx(self) -> re.Pattern[str] | None:
        return compile_regex(self.replacement, "measure.kernels.replacement")

    def endpoints(self, gated: list[Row] | tuple[Row, ...]) -> tuple[str, ...]:
        """Row kinds whose gated rows the benchmark's endpoint gates judge (``bench.endpoints``; null: every
        kind the gated rows have, in their order)."""
        listed = self.bench.get("endpoints")
        if listed is not None:
            return tuple(listed)
        return tuple(dict.fromkeys(r.kind for r in gated))

    def variables(self, row: Row) -> dict[str, float]:
        """The names a byte or flop expression may use: the row's numeric values and ``dtype_bytes``."""
        return {"dtype_bytes": float(DTYPE_BYTES[self.dtype]), **row.variables()}

    def evaluate(self, row: Row, expr: str | int | float, key: str) -> float:
        return eval_expression(expr, self.variables(row), f"measure.mechanism.{key}")

    def temporary_bytes(self, row: Row, t: Temporary) -> int:
        """One temporary's size on ``row``."""
        return int(self.evaluate(row, t.bytes_expr, f"removes.temporaries.{t.name}.bytes"))

    def expected_bytes(self, row: Row) -> int:
        """Bytes of the temporaries the hypothesis removes (each allocated once per call)."""
        return sum(self.temporary_bytes(row, t) for t in self.temporaries)

    def removed_traffic_bytes(self, row: Row) -> int:
        """Global-memory traffic the hypothesis removes: each temporary's bytes times its accesses."""
        return sum(self.temporary_bytes(row, t) * t.accesses for t in self.temporaries)

    def row_class(self, row: Row) -> str | None:
        """The row's dispatch class: its ``dispatch`` value, else ``measure.dispatch_of`` formatted over its values
        and kind, else None."""
        own = row.values.get("dispatch")
        if own is not None:
            klass, key = str(own), f"rows.{row.name}.dispatch"
        elif self.dispatch_of is None:
            return None
        else:
            key = "measure.dispatch_of"
            try:
                klass = self.dispatch_of.format(kind=row.kind, **row.values)
            except (KeyError, IndexError, ValueError) as exc:
                raise ConfigError(f"campaign {self.campaign}: key '{key}': '{self.dispatch_of}' cannot be formatted "
                                  f"for row {row.name} ({type(exc).__name__}: {exc}; row values: "
                                  f"{', '.join(sorted(row.values))}, kind)") from exc
        if klass not in self.known_classes:
            raise ConfigError(f"campaign {self.campaign}: key '{key}': row {row.name} has dispatch class {klass!r}, "
                              f"not one of dispatch.classes ({', '.join(self.known_classes) or 'none declared'})")
        return klass

    def row_path(self, row: Row, enabled: tuple[str, ...] | list[str], cand_kernels: dict[str, Any],
                 iterations: int) -> tuple[str, str]:
        """(``optimized`` | ``fallback``, why) of one row of the candidate.

        The row's dispatch class decides when it has one: optimized when the candidate enables
        the class. A row without a class is decided by the removed kernels when the mechanism
        removes some (still launched: fallback), else it is optimized (an in-place change
        applies on every row).
        """
        klass = self.row_class(row)
        if klass is not None:
            on = klass in enabled
            return ("optimized" if on else "fallback"), (f"dispatch class {klass} is "
                                                         f"{'enabled' if on else 'not enabled'} by the candidate")
        rx = self.removed_rx
        if rx is not None:
            n = sum(k["launches"] for name, k in cand_kernels.items() if rx.search(name)) / max(iterations, 1)
            if n > 0:
                return "fallback", f"the candidate still launches /{self.removed}/ ({n:g} per call)"
            return "optimized", f"the candidate launches no /{self.removed}/"
        return "optimized", "no dispatch class: the in-place change applies on every row"

    def worker_init(self) -> dict[str, Any]:
        """The ``init`` request every worker of this campaign receives (identical for both arms)."""
        return {"callable": self.callable, "inputs_file": str(self.inputs), "dtype": self.dtype,
                "seed": self.seed, "differentiate": list(self.differentiate), "cpu": self.cpu,
                "cpu_setup": str(self.cpu_setup) if self.cpu_setup else None,
                "flush_bytes": self.cpu_settings.get("flush_bytes") if self.cpu else None,
                "env_record": list(self.env_record), "writes_inputs": self.writes_inputs}

    # row selection ------------------------------------------------------------

    def select(self, table: dict[str, Row], names: list[str] | None, key: str) -> list[Row]:
        if names is None:
            return list(table.values())
        missing = [n for n in names if n not in table]
        if missing:
            raise ConfigError(f"campaign {self.campaign}: key '{key}': unknown row(s) {', '.join(missing)} "
                              f"(rows: {', '.join(table)})")
        return [table[n] for n in names]

    def profile_rows(self, table: dict[str, Row]) -> list[Row]:
        if self.cpu:
            return self.select(table, self.cpu_settings.get("profile_rows"), "measure.cpu.profile_rows")
        return self.select(table, self.profile.get("rows"), "profile.rows")

    def gated_rows(self, table: dict[str, Row]) -> list[Row]:
        if self.cpu:
            return self.select(table, self.cpu_settings.get("gated"), "measure.cpu.gated")
        return self.select(table, self.bench.get("gated"), "bench.gated")

    def control_rows(self, table: dict[str, Row]) -> list[Row]:
        if self.cpu:
            return self.select(table, list(self.cpu_settings.get("controls", [])), "measure.cpu.controls")
        return self.select(table, list(self.bench.get("controls", [])), "bench.controls")

    def iterations(self) -> int:
        return int(self.cpu_settings["iterations"] if self.cpu else self.profile["iterations"])

    def samples(self) -> int:
        return int(self.cpu_settings["samples"] if self.cpu else self.bench["samples"])

    @property
    def hold(self) -> bool:
        """Whether timed calls hold the GPU until the host has enqueued them (``bench.timer: host_ahead``, GPU only):
        the profile stages time their endpoints as bench does."""
        return not self.cpu and self.bench.get("timer", "host_ahead") == "host_ahead"

    def endpoint_samples(self) -> int:
        return int(self.cpu_settings["samples"] if self.cpu else self.profile["endpoint_samples"])

    def rounds(self) -> tuple[int, int]:
        r = self.bench["rounds"]
        cap = int(self.cpu_settings["max_rounds"]) if self.cpu else int(r["max"])
        return int(r["min"]), max(cap, int(r["min"]))


def load_spec(campaign: Campaign, gpu: str) -> MeasureSpec | None:
    """The campaign's measurement settings, or None when it has no ``measure`` section."""
    d = campaign.data
    m = d.get("measure")
    if not m:
        return None
    inputs = paths.PROJECT / m["inputs"]
    if not inputs.is_file():
        raise ConfigError(f"{campaign.path}: key 'measure.inputs': file '{m['inputs']}' does not exist")
    cpu = gpu == "cpu"
    rows_src = m["cpu"]["rows"] if cpu else m.get("rows", [])
    rows = tuple(row_from_spec(r, f"{campaign.path}: key '{'measure.cpu.rows' if cpu else 'measure.rows'}'")
                 for r in rows_src)
    kernels = m.get("kernels") or {}
    try:
        mech = Mechanism.from_data(m["mechanism"])
    except ConfigError as exc:
        raise ConfigError(f"{campaign.path}: {exc}") from exc
    setup = d["gate"].get("cpu_setup")
    reg = m.get("registry") or {}
    spec = MeasureSpec(
        campaign=campaign.name, cpu=cpu, callable=m["callable"], inputs=inputs, dtype=m["dtype"],
        seed=int(m["seed"]), differentiate=tuple(int(i) for i in m["differentiate"]),
        class_key=m.get("class_key"), classes=tuple(m.get("classes") or ()), bar=float(m["bar"]),
        registry=reg.get("op"), registry_format=reg.get("format"), explicit_rows=rows, mechanism=mech,
        replaced=kernels.get("replaced"), replacement=kernels.get("replacement"), dispatch_of=m.get("dispatch_of"),
        writes_inputs=bool(m.get("writes_inputs", False)),
        known_classes=tuple(k["name"] for k in (d.get("dispatch") or {}).get("classes", [])),
        profile=d.get("profile") or {}, bench=d.get("bench") or {},
        cpu_settings=m["cpu"], cpu_setup=(paths.PROJECT / setup) if (cpu and setup) else None,
        env_record=tuple(d.get("env", {}).get("record", [])))
    # fail at construction: every regex and expression the stages will use
    spec.removed_rx, spec.replaced_rx, spec.replacement_rx  # noqa: B018
    if ":" not in spec.callable:
        raise ConfigError(f"{campaign.path}: key 'measure.callable': expected 'module.path:name', got '{spec.callable}'")
    for row in rows:
        for key, expr in mech.expressions():
            try:
                value = eval_expression(expr, spec.variables(row), key)
            except ConfigError as exc:
                raise ConfigError(f"{campaign.path}: {exc} (row {row.name})") from exc
            if value < 0:
                raise ConfigError(f"{campaign.path}: key '{key}': '{expr}' is {value:g} for row {row.name} "
                                  "(bytes and flops are never negative)")
        spec.row_class(row)
    return spec


def dispatch_rows(campaign_data: dict[str, Any], cpu: bool) -> list[Row]:
    """The comparison rows of this device, each with a declared dispatch class."""
    d = campaign_data.get("dispatch") or {}
    key = "dispatch.cpu_rows" if cpu else "dispatch.rows"
    known = {k["name"] for k in d.get("classes", [])}
    rows = [row_from_spec(r, key) for r in d.get("cpu_rows" if cpu else "rows", [])]
    for r in rows:
        cls = r.values.get("dispatch")
        if cls not in known:
            raise ConfigError(f"key '{key}': row {r.name} names dispatch class {cls!r}, not one of "
                              f"{', '.join(sorted(known))}")
    return rows


def row_table(explicit: tuple[Row, ...] | list[Row], registry_rows: list[Row] | None = None) -> dict[str, Row]:
    table: dict[str, Row] = {}
    for row in list(registry_rows or []) + list(explicit):
        if row.name in table:
            raise ConfigError(f"row '{row.name}' is defined twice (registry and measure.rows, or twice in a list)")
        table[row.name] = row
    return table


def table_from_record(profile_record: dict[str, Any]) -> dict[str, Row]:
    """The row table profile_baseline resolved (registry rows are read once, there)."""
    return {r["name"]: Row.from_dict(r) for r in profile_record["data"]["row_table"]}


def inputs_fingerprint(campaign: Campaign) -> str:
    """sha256 of the campaign's input generator (a rule param: editing it reruns the timed stages)."""
    m = campaign.data.get("measure")
    if not m:
        return "no-measure"
    path = paths.PROJECT / m["inputs"]
    return sha256_file(path) if path.is_file() else "missing"
