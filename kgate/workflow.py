"""What the Snakefile needs at DAG-build time: validated config and identities.

Runs on the machine that builds the DAG (the login node under Slurm) and
again inside every job, and is cheap, so the candidate's identity is
recomputed every time. It reads the campaign, the overlay files and the
user's clone, and writes one file: ``resolve`` opens or checks the epoch
ledger ``results/<campaign>/epochs.json`` (``kgate.epochs.open_or_check``:
written on the first run, and when the contract changed before a freeze or
with ``new_epoch=true``, which also archives the records).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kgate import campaign as campaign_mod
from kgate import device, epochs
from kgate.campaign import Campaign, validate
from kgate.records import read_record
from kgate.source import candidate


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
    return read_record(path)["status"]
