"""Campaign validation: a malformed campaign fails before any job with one line naming the key."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import REPO

from kgate import campaign
from kgate.errors import ConfigError

DEFAULT = REPO / "config" / "campaigns" / "rwkv6-bwd-fusion.yaml"


def write(tmp_path: Path, mutate) -> Path:
    data = yaml.safe_load(DEFAULT.read_text())
    data["candidate"]["overlay"] = "kernels/rwkv6_bwd_fused/identity"
    mutate(data)
    path = tmp_path / f"{data['name']}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize(("mutate", "expected"), [
    (lambda d: d.update(colour="red"), "key '<top level>': unknown key(s) colour"),
    (lambda d: d["gate"].update(test=["x"]), "key 'gate': unknown key(s) test"),
    (lambda d: d["gate"].update(tests=[]), "key 'gate.tests'"),
    (lambda d: d["gate"].pop("tests"), "'tests' is required"),
    (lambda d: d["target"]["pypi"].update(sha256="abc"), "key 'target.pypi.sha256'"),
    (lambda d: d["target"].update(repo={"path": "/x", "baseline": "27967b97"}),
     "key 'target': needs exactly one of repo, pypi"),
    (lambda d: d["candidate"].update(ref="main"), "key 'candidate': needs exactly one of overlay, ref, worktree"),
    (lambda d: d["gate"].update(reruns="two"), "key 'gate.reruns'"),
    (lambda d: d["fixture"].update(overlay="kernels/nope"), "key 'fixture.overlay': folder 'kernels/nope' does not exist"),
])
def test_malformed_campaign_is_one_line_naming_the_key(tmp_path: Path, mutate, expected: str) -> None:
    """Each malformation is reported as a single line that names the key."""
    path = write(tmp_path, mutate)
    with pytest.raises(ConfigError) as err:
        campaign.load(path)
    msg = str(err.value)
    assert expected in msg, msg
    assert "\n" not in msg and str(path) in msg


def test_defaults_are_filled_from_the_schema(tmp_path: Path) -> None:
    """Keys left out take the schema's documented defaults."""
    c = campaign.load(write(tmp_path, lambda d: d["gate"].pop("reruns")))
    assert c.data["gate"]["reruns"] == 2
    assert c.data["candidate"]["lint"] == {"ruff": True, "select": None}
    assert c.target_identity == "pypi:fla-core==0.6.0"


def test_every_schema_key_is_documented() -> None:
    """The schema is the documentation: every property carries a description."""
    missing = []

    def walk(node, where):
        if isinstance(node, dict):
            for key, sub in node.get("properties", {}).items():
                if "description" not in sub:
                    missing.append(f"{where}.{key}")
                walk(sub, f"{where}.{key}")
            if isinstance(node.get("items"), dict):
                walk(node["items"], where + "[]")
    for name in ("campaign", "config", "overlay"):
        walk(campaign.schema(name), name)
    assert not missing, missing


def test_snakemake_refuses_a_malformed_campaign_before_any_job(tmp_path: Path) -> None:
    """The workflow exits non-zero at parse time with the one line, and creates no results."""
    path = write(tmp_path, lambda d: d.update(colour="red"))
    env = dict(os.environ, PATH=str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"])
    proc = subprocess.run([sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(tmp_path),
                           "--profile", str(REPO / "profiles/local"), "--config", f"campaign={path}"],
                          capture_output=True, text=True, env=env)
    assert proc.returncode != 0
    assert proc.stderr.strip().splitlines()[-1].startswith("kgate: error: ")
    assert "unknown key(s) colour" in proc.stderr
    assert not (tmp_path / "results").exists()


def test_unknown_campaign_name_lists_the_known_ones() -> None:
    with pytest.raises(ConfigError, match="known: .*rwkv6-bwd-fusion"):
        campaign.load("no-such-campaign")
