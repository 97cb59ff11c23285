"""Writing what ``kgate init`` composed: the campaign file, its folder, and the check of both.

Method: the campaign is YAML (``config/campaigns/<name>.yaml``) headed by
the account of every decision and every value left to fill in; its folder
``kernels/<name>/`` holds the fixture overlay (``fixture/overlay.yaml``, new
files under ``fixture/files/``, appended text under ``fixture/appended/``,
one variant for the base commit) and the input generator
(``bench_inputs.py``). Files go through kgate's atomic writers (the user's
umask applies). Before anything is reported, the fixture overlay is applied
with ``kgate.source.overlay`` to the base versions of its files in a scratch
folder and must give exactly the head's (or, with ``--test-edits fixture``,
the edited) versions; then the campaign is loaded as the DAG build loads it
(``kgate.campaign_checks.load``): with values left to fill in it is refused,
one line naming the first key, and init lists every such key. Nothing is ever
written into the user's clone.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import yaml

from kgate import campaign as campaign_mod
from kgate import campaign_checks
from kgate.errors import ConfigError, KgateError
from kgate.init.change import Change
from kgate.init.compose import Plan
from kgate.init.split import Edit
from kgate.records import atomic_write_bytes, atomic_write_text
from kgate.source import overlay


class _Dumper(yaml.SafeDumper):
    """Block style for text of several lines (overlay anchors and appended code stay readable)."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None)


def _flow(items: list[Any]) -> bool:
    """Flow style (``[a, b]``, ``{k: v}``) for a short collection of scalars, block style otherwise."""
    return all(isinstance(v, (str, int, float, bool, type(None))) and "\n" not in str(v) for v in items) \
        and sum(len(str(v)) + 2 for v in items) <= 90


def _dict(dumper: yaml.SafeDumper, value: dict[str, Any]) -> yaml.MappingNode:
    return dumper.represent_mapping("tag:yaml.org,2002:map", value.items(),
                                    flow_style=_flow([*value.keys(), *value.values()]))


def _list(dumper: yaml.SafeDumper, value: list[Any]) -> yaml.SequenceNode:
    return dumper.represent_sequence("tag:yaml.org,2002:seq", value, flow_style=_flow(value))


_Dumper.add_representer(str, _str)
_Dumper.add_representer(dict, _dict)
_Dumper.add_representer(list, _list)


def _write(path: Path, data: bytes | str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    (atomic_write_bytes if isinstance(data, bytes) else atomic_write_text)(path, data)  # type: ignore[arg-type]


def overlay_manifest(edits: tuple[Edit, ...], base: str, head: str) -> tuple[dict[str, Any], dict[str, bytes]]:
    """The fixture's overlay.yaml data and the files it names (relative to the overlay folder)."""
    entries: list[dict[str, Any]] = []
    files: dict[str, bytes] = {}
    for e in edits:
        if e.op == "create":
            files[f"files/{e.path}"] = e.content
            entries.append({"path": e.path, "create": f"files/{e.path}"})
        elif e.op == "append":
            name = f"appended/{e.path}"
            n = sum(1 for k in files if k == name or k.startswith(name + "."))
            name = name if n == 0 else f"{name}.{n + 1}"
            files[name] = e.content
            entries.append({"path": e.path, "append": name})
        else:
            entries.append({"path": e.path, "replace": {"find": e.find, "with": e.with_}})
    data = {"schema": "kgate.overlay/1",
            "description": f"The tests the change {head} adds (written by kgate init)",
            "variants": [{"applies_to": [f"git:{base}"], "edits": entries}]}
    return data, files


def campaign_text(plan: Plan) -> str:
    """The campaign YAML, headed by the account of what init decided and what is left to fill in."""
    head = ["# Written by `python -m kgate init`. Every key: kgate/schemas/campaign.schema.yaml; the method: docs/init.md.",
            "# Values starting with TODO(kgate init) are yours to decide: until each is filled in, the DAG build and a",
            "# dry run refuse the campaign with one line naming the key. Decided by init (confirm each):"]
    head += [f"#   {tag}: {text}" for tag, text in plan.lines]
    body = yaml.dump(plan.data, Dumper=_Dumper, sort_keys=False, width=110, allow_unicode=True)
    return "\n".join(head) + "\n" + body


def check_fixture(change: Change, folder: Path, edits: tuple[Edit, ...]) -> None:
    """Apply the written overlay to the base versions of its files; each must become the head's version."""
    touched = sorted({e.path for e in edits})
    with tempfile.TemporaryDirectory(prefix="kgate-init-") as tmp:
        root = Path(tmp)
        for path in touched:
            data = change.base_bytes(path)
            if data is not None:
                (root / path).parent.mkdir(parents=True, exist_ok=True)
                (root / path).write_bytes(data)
        overlay.apply(overlay.select(folder, f"git:{change.base}"), root)
        wrong = [p for p in touched if (root / p).read_bytes() != change.head_bytes(p)]
    if wrong:
        raise KgateError(f"{folder}/overlay.yaml does not reproduce the head's {', '.join(wrong)} (a kgate init bug)")


def write(plan: Plan, change: Change, overwrite: bool) -> list[tuple[str, str]]:
    """Write the campaign and its folder; return the account plus the TODO and check lines."""
    for p in (plan.campaign_file, plan.kernels_dir):
        if p.exists() and not overwrite:
            raise ConfigError(f"{p} exists: pass --overwrite to replace kgate's own files (the clone is never written)")
    if plan.kernels_dir.exists():
        shutil.rmtree(plan.kernels_dir)
    if plan.fixture:
        folder = plan.kernels_dir / "fixture"
        manifest, files = overlay_manifest(plan.fixture, change.base, change.head)
        for rel, data in files.items():
            _write(folder / rel, data)
        _write(folder / "overlay.yaml", yaml.dump(manifest, Dumper=_Dumper, sort_keys=False, width=110,
                                                  allow_unicode=True))
        check_fixture(change, folder, plan.fixture)
    _write(plan.kernels_dir / "bench_inputs.py", plan.inputs)
    text = campaign_text(plan)
    _write(plan.campaign_file, text)
    lines = list(plan.lines)
    left = campaign_mod.todos(yaml.safe_load(text))
    lines += [("TODO", f"{key}: {what}") for key, what in left]
    try:
        campaign_checks.load(plan.campaign_file)
        lines.append(("check", "the campaign passes kgate's static checks: the DAG build and a dry run accept it"))
    except ConfigError as exc:
        lines.append(("check", f"the DAG build refuses it until the TODOs are filled in: {exc}" if left
                      else f"the campaign fails kgate's static checks: {exc}"))
    return lines
