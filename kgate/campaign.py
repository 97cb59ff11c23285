"""Campaign loading and validation.

A campaign file is YAML validated against ``kgate/schemas/campaign.schema.yaml``
(JSON Schema 2020-12, unknown keys rejected). Validation errors become one
``ConfigError`` line naming the file, the key path and the problem, raised
before any job starts. A value ``kgate init`` left for the user to decide (a
string starting with ``TODO_MARK``) is refused first, naming its key and saying
what to fill in. Defaults from the schema are filled in, so stages read
one fully resolved mapping. What the schema cannot say about paths is checked
next (``_check_paths``). Everything else the file alone decides (regexes, row
sizes, row names, endpoint kinds, classes) is ``kgate.campaign_checks``, whose
``load`` the DAG build and every stage job use.
"""

from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from kgate import paths
from kgate.errors import ConfigError

#: The mark ``kgate init`` writes at the start of a value the user must still decide (followed by what to decide).
#: A campaign holding one is refused before its schema is checked, with the key and the rest of the value.
TODO_MARK = "TODO(kgate init)"


def load_yaml(path: Path) -> Any:
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from exc
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{path}:{where} is not valid YAML: {getattr(exc, 'problem', exc)}") from exc


def schema(name: str) -> dict[str, Any]:
    """Return the JSON schema ``kgate/schemas/<name>.schema.yaml`` (``kgate.paths.schema``)."""
    return load_yaml(paths.schema(name))


def _key_path(error: jsonschema.ValidationError) -> str:
    parts = [str(p) for p in error.absolute_path]
    return ".".join(parts) if parts else "<top level>"


def _one_line(error: jsonschema.ValidationError) -> str:
    """Turn the most specific schema error into a short human sentence."""
    if error.validator == "additionalProperties":
        extra = sorted(set(error.instance) - set(error.schema.get("properties", {})))
        return f"unknown key(s) {', '.join(extra)} (allowed: {', '.join(sorted(error.schema.get('properties', {})))})"
    if error.validator == "required":
        return error.message.replace("is a required property", "is required")
    if error.validator == "oneOf" and isinstance(error.instance, dict):
        options = [s.get("required", ["?"])[0] for s in error.schema["oneOf"]]
        given = [o for o in options if o in error.instance]
        return f"needs exactly one of {', '.join(options)} (given: {', '.join(given) or 'none'})"
    return error.message


def validate(data: Any, schema_name: str, source: str) -> None:
    """Validate ``data`` against a schema; raise one ``ConfigError`` line on failure."""
    validator = jsonschema.Draft202012Validator(schema(schema_name))
    errors = sorted(validator.iter_errors(data), key=lambda e: (len(list(e.absolute_path)), str(e.absolute_path)))
    if errors:
        best = jsonschema.exceptions.best_match(errors)
        raise ConfigError(f"{source}: key '{_key_path(best)}': {_one_line(best)}")


def _fill_defaults(node: Any, sch: dict[str, Any]) -> Any:
    """Fill ``default`` values of object properties, recursively (schema-driven)."""
    if not isinstance(node, dict) or sch.get("type") != "object":
        return node
    for key, sub in sch.get("properties", {}).items():
        if key not in node and "default" in sub:
            node[key] = copy.deepcopy(sub["default"])
        elif key not in node and sub.get("type") == "object" and not sub.get("required") and not sub.get("minProperties"):
            # an optional section with nothing required is there with its defaults; one that must say something
            # when present (minProperties) stays absent
            node[key] = {}
        if key in node:
            node[key] = _fill_defaults(node[key], sub)
    return node


def _off(value: Any) -> bool:
    return value is None or value is False or (isinstance(value, (list, dict)) and not value)


def without_off_defaults(node: Any, sch: dict[str, Any]) -> Any:
    """``node`` without every key whose value is its schema default where that default is *off* (null, false,
    an empty list or mapping), recursively, and without optional sections left empty by that.

    What kgate.epochs hashes as the contract: a kgate that adds a key whose default is off (a feature that does
    nothing until a campaign sets it), and a campaign that writes such a default out, hash as before. A default
    that is on (a number, a string, a non-empty list) stays in: a kgate that changes it changes the contract.
    """
    if not isinstance(node, dict) or sch.get("type") != "object":
        return node
    out = {}
    for key, value in node.items():
        sub = sch.get("properties", {}).get(key, {})
        default = sub.get("default", ...)
        if _off(default) and type(value) is type(default) and value == default:
            continue
        pruned = without_off_defaults(value, sub)
        if pruned == {} and value != {} and sub.get("type") == "object" and "default" not in sub:
            continue
        out[key] = pruned
    return out


def todos(node: Any, prefix: str = "") -> list[tuple[str, str]]:
    """Every value still marked ``TODO_MARK``: (dotted key, what to fill in), in file order."""
    if isinstance(node, str):
        return [(prefix or "<top level>", node[len(TODO_MARK):].lstrip(" :"))] if node.startswith(TODO_MARK) else []
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    return [t for k, v in items for t in todos(v, f"{prefix}.{k}" if prefix else str(k))]


def refuse_todos(data: Any, source: str) -> None:
    """One ``ConfigError`` line naming the first value ``kgate init`` left to fill in (and how many more there are)."""
    left = todos(data)
    if left:
        key, what = left[0]
        more = f" ({len(left) - 1} more: {', '.join(k for k, _ in left[1:])})" if len(left) > 1 else ""
        raise ConfigError(f"{source}: key '{key}': written by kgate init: fill in: {what}{more}")


def section_defaults(section: str) -> dict[str, Any]:
    """What the defaults fill into an empty top-level ``section`` of a campaign (its keys nobody set)."""
    return _fill_defaults({}, schema("campaign")["properties"][section])


@dataclass(frozen=True, slots=True)
class CandidateSource:
    """Where the candidate comes from: kind is overlay, ref or worktree."""

    kind: str
    value: str


@dataclass(frozen=True, slots=True)
class Campaign:
    """A validated campaign with defaults filled in."""

    name: str
    path: Path
    data: dict[str, Any]

    @property
    def target_kind(self) -> str:
        return "repo" if "repo" in self.data["target"] else "pypi"

    @property
    def repo_path(self) -> Path:
        """``target.repo.path`` as a folder: ``~`` expanded, a relative path taken from the kgate checkout."""
        p = Path(self.data["target"]["repo"]["path"]).expanduser()
        return p if p.is_absolute() else paths.PROJECT / p

    def existing_repo_path(self) -> Path:
        """:attr:`repo_path`, refused with one line naming the key when no folder is there (the clone is read at
        DAG build for a ``ref:`` candidate's diff, and by the target stage)."""
        p = self.repo_path
        if not p.is_dir():
            raise ConfigError(f"key 'target.repo.path' (or --config target_path=<clone>): {p} is not a folder: "
                              "clone the target there")
        return p

    @property
    def target_identity(self) -> str:
        """``git:<sha>`` or ``pypi:<requirement>``: selects overlay variants."""
        t = self.data["target"]
        if "repo" in t:
            return f"git:{t['repo']['baseline']}"
        return f"pypi:{t['pypi']['requirement']}"

    @property
    def candidate_source(self) -> CandidateSource:
        c = self.data["candidate"]
        for kind in ("overlay", "ref", "worktree"):
            if kind in c:
                return CandidateSource(kind, c[kind])
        raise ConfigError(f"{self.path}: key 'candidate': needs one of overlay, ref, worktree")

    @property
    def fixture_test_paths(self) -> tuple[str, ...]:
        """Glob patterns the fixture may touch: ``fixture.test_paths``, else (null) the folders of ``gate.tests``
        and everything below them (a listed file's own folder; a file at the root allows only itself)."""
        listed = self.data["fixture"].get("test_paths")
        if listed is not None:
            return tuple(listed)
        out = []
        for t in self.data["gate"]["tests"]:
            p = t.rstrip("/")
            folder = p if not p.endswith(".py") else p.rpartition("/")[0]
            out.append(f"{folder}/**" if folder else p)
        return tuple(dict.fromkeys(out))

    def section_hash(self, *keys: str) -> str:
        """sha256 (16 hex) of the named top-level sections: a params value that
        reruns a stage exactly when the part of the campaign it reads changes."""
        blob = json.dumps({k: self.data.get(k) for k in keys}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


def resolve_campaign_path(spec: str) -> Path:
    """A campaign name under config/campaigns/ or a path to a YAML file."""
    p = Path(spec).expanduser()
    if p.suffix in (".yaml", ".yml"):
        return p if p.is_absolute() else (Path.cwd() / p)
    named = paths.CAMPAIGNS / f"{spec}.yaml"
    if not named.exists():
        known = sorted(x.stem for x in paths.CAMPAIGNS.glob("*.yaml"))
        raise ConfigError(f"config key 'campaign': no campaign named '{spec}' (known: {', '.join(known)})")
    return named


def load(spec: str | Path, overrides: dict[str, Any] | None = None) -> Campaign:
    """Load, apply overrides (target_path, candidate), validate, fill defaults."""
    path = resolve_campaign_path(str(spec))
    data = load_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a campaign must be a mapping")
    overrides = overrides or {}
    if overrides.get("target_path"):
        repo = data.get("target", {}).get("repo")
        if not isinstance(repo, dict):
            raise ConfigError(f"config key 'target_path': campaign {path.name} has no target.repo to override")
        repo["path"] = overrides["target_path"]
    if overrides.get("candidate"):
        kind, sep, value = str(overrides["candidate"]).partition(":")
        if not sep or kind not in ("overlay", "ref", "worktree") or not value:
            raise ConfigError("config key 'candidate': expected overlay:<folder>, ref:<git ref> or worktree:<path>")
        cand = data.setdefault("candidate", {})
        for k in ("overlay", "ref", "worktree"):
            cand.pop(k, None)
        cand[kind] = value
    refuse_todos(data, str(path))
    validate(data, "campaign", str(path))
    data = _fill_defaults(data, schema("campaign"))
    if path.stem != data["name"]:
        raise ConfigError(f"{path}: key 'name': '{data['name']}' must equal the file name '{path.stem}'")
    _check_paths(data, path)
    return Campaign(name=data["name"], path=path, data=data)


def _check_paths(data: dict[str, Any], path: Path) -> None:
    """Semantic checks the schema cannot express; each names its key."""
    def kgate_path(key: str, value: str, want_dir: bool) -> None:
        p = paths.PROJECT / value
        ok = p.is_dir() if want_dir else p.is_file()
        if not ok:
            raise ConfigError(f"{path}: key '{key}': {'folder' if want_dir else 'file'} '{value}' does not exist")

    kgate_path("fixture.overlay", data["fixture"]["overlay"], True)
    if "overlay" in data["candidate"]:
        kgate_path("candidate.overlay", data["candidate"]["overlay"], True)
    if data["gate"].get("cpu_setup"):
        kgate_path("gate.cpu_setup", data["gate"]["cpu_setup"], False)
    pypi = data["target"].get("pypi")
    for suite in (pypi or {}).get("gate_suite") or []:
        kgate_path("target.pypi.gate_suite", suite, True)
    both = sorted(set(data["gate"].get("env") or {}) & set(data["gate"].get("forbid_env") or []))
    if both:
        raise ConfigError(f"{path}: key 'gate.env': {', '.join(both)} is also in gate.forbid_env")
    if "ref" in data["candidate"] and "repo" not in data["target"]:
        raise ConfigError(f"{path}: key 'candidate.ref': a git ref candidate needs a target.repo")
