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
class Temporary:
    name: str
    bytes_expr: str
    accesses: int

    def nbytes(self, row: Row) -> int:
        return int(eval_expression(self.bytes_expr, row.variables(), f"measure.temporaries.{self.name}.bytes"))


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
    class_key: str
    classes: tuple[Any, ...]
    bar: float
    registry: str | None
    explicit_rows: tuple[Row, ...]
    removed: str
    replaced: str | None
    replacement: str | None
    temporaries: tuple[Temporary, ...]
    profile: dict[str, Any]
    bench: dict[str, Any]
    cpu_settings: dict[str, Any]
    cpu_setup: Path | None
    env_record: tuple[str, ...]

    @property
    def removed_rx(self) -> re.Pattern[str]:
        rx = compile_regex(self.removed, "measure.kernels.removed")
        assert rx is not None
        return rx

    @property
    def replaced_rx(self) -> re.Pattern[str]:
        rx = compile_regex(self.replaced or self.removed, "measure.kernels.replaced")
        assert rx is not None
        return rx

    @property
    def replacement_rx(self) -> re.Pattern[str] | None:
        return compile_regex(self.replacement, "measure.kernels.replacement")

    @property
    def endpoints(self) -> tuple[str, ...]:
        """Row kinds whose gated rows the benchmark's endpoint gates judge (``bench.endpoints``)."""
        return tuple(self.bench.get("endpoints", ("dense", "varlen")))

    def expected_bytes(self, row: Row) -> int:
        """Bytes of the temporaries the hypothesis removes (each allocated once per call)."""
        return sum(t.nbytes(row) for t in self.temporaries)

    def removed_traffic_bytes(self, row: Row) -> int:
        """Global-memory traffic the hypothesis removes: each temporary's bytes times its accesses."""
        return sum(t.nbytes(row) * t.accesses for t in self.temporaries)

    def worker_init(self) -> dict[str, Any]:
        """The ``init`` request every worker of this campaign receives (identical for both arms)."""
        return {"callable": self.callable, "inputs_file": str(self.inputs), "dtype": self.dtype,
                "seed": self.seed, "differentiate": list(self.differentiate), "cpu": self.cpu,
                "cpu_setup": str(self.cpu_setup) if self.cpu_setup else None,
                "flush_bytes": self.cpu_settings.get("flush_bytes") if self.cpu else None,
                "env_record": list(self.env_record)}

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
    kernels = m["kernels"]
    temps = tuple(Temporary(t["name"], str(t["bytes"]), int(t.get("accesses", 2))) for t in m.get("temporaries", []))
    setup = d["gate"].get("cpu_setup")
    spec = MeasureSpec(
        campaign=campaign.name, cpu=cpu, callable=m["callable"], inputs=inputs, dtype=m["dtype"],
        seed=int(m["seed"]), differentiate=tuple(int(i) for i in m["differentiate"]),
        class_key=m["class_key"], classes=tuple(m["classes"]), bar=float(m["bar"]),
        registry=m.get("registry"), explicit_rows=rows,
        removed=kernels["removed"], replaced=kernels.get("replaced"), replacement=kernels.get("replacement"),
        temporaries=temps, profile=d.get("profile") or {}, bench=d.get("bench") or {},
        cpu_settings=m["cpu"], cpu_setup=(paths.PROJECT / setup) if (cpu and setup) else None,
        env_record=tuple(d.get("env", {}).get("record", [])))
    # fail at construction: every regex and expression the stages will use
    spec.removed_rx, spec.replaced_rx, spec.replacement_rx  # noqa: B018
    if ":" not in spec.callable:
        raise ConfigError(f"{campaign.path}: key 'measure.callable': expected 'module.path:name', got '{spec.callable}'")
    for row in rows:
        spec.expected_bytes(row)
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
