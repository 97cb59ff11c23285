"""What the Snakefile needs at DAG-build time: validated config and identities.

Runs on the machine that builds the DAG (the login node under Slurm) and
again inside every job; it only reads (campaign, overlay files, the user's
clone) and is cheap, so the candidate's identity is recomputed every time.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kgate import campaign as campaign_mod
from kgate import candidate, device, epochs, paths
from kgate.campaign import Campaign, validate


@dataclass(frozen=True, slots=True)
class Run:
    """One invocation's campaign, device class and candidate id."""

    campaign: Campaign
    gpu: str
    candidate: str
    force: bool
    config: dict[str, Any]
    epoch: dict[str, Any]

    @property
    def name(self) -> str:
        return self.campaign.name

    def cli_overrides(self, *, candidate: bool = True) -> list[str]:
        """Arguments that make a stage see the same campaign as the DAG did.

        Baseline stages get no candidate override: it is not theirs, and as a
        rule parameter it would rerun them whenever the candidate changes.
        """
        out = []
        if self.config.get("target_path"):
            out += ["--target-path", self.config["target_path"]]
        if candidate and self.config.get("candidate"):
            out += ["--candidate-source", self.config["candidate"]]
        return out


def resolve(config: dict[str, Any]) -> Run:
    cfg = {k: v for k, v in config.items()}
    validate(cfg, "config", "config")
    camp = campaign_mod.load(cfg["campaign"], {"target_path": cfg.get("target_path"),
                                                "candidate": cfg.get("candidate")})
    gpu = cfg.get("gpu", "auto")
    if gpu == "auto":
        gpu = device.detect().klass
    epoch = epochs.open_or_check(camp, _flag(cfg.get("new_epoch", False)))
    return Run(campaign=camp, gpu=gpu, candidate=candidate.identity(camp), force=_flag(cfg.get("force", False)),
               config=cfg, epoch=epoch)


def _flag(value: bool | str) -> bool:
    """A boolean config value given as YAML or on the command line (``--config force=true``)."""
    return value if isinstance(value, bool) else value.lower() == "true"


def status(path: str | Path) -> str:
    """Status of a finished record (read by the report's input function)."""
    return json.loads(Path(path).read_text())["status"]


def gated_walk(status_of: Callable[[str], str], force: bool = False) -> list[str]:
    """The stages the report's input function asks for, in order (workflow/rules/common.smk).

    ``status_of(stage)`` makes the stage's checkpoint known (Snakemake runs it
    first) and returns its record's status. A stage is asked for only when
    every one of its gating inputs (``paths.GATING_INPUTS``) let it through
    (``paths.lets_through``: passed; or, in a forced run, stopped, or a
    measuring stage's fail or inconclusive); a record that could not measure
    (``unavailable``) blocks only the stages that gate on it; any other status
    ends the walk, so no stage is ever asked for past a failed integrity or
    correctness gate. Tests: tests/test_model_gates.py.
    """
    asked, passed = [], set()
    for stage in paths.STAGES:
        if any(s not in passed for s in paths.GATING_INPUTS[stage]):
            continue
        asked.append(stage)
        st = status_of(stage)
        if paths.lets_through(stage, st, force):
            passed.add(stage)
        elif st != "unavailable":
            break
    return asked
