"""What the Snakefile needs at DAG-build time: validated config and identities.

Runs on the machine that builds the DAG (the login node under Slurm) and
again inside every job, and is cheap, so the candidate's identity is
recomputed every time. ``resolve`` reads the campaign, the overlay files and
the user's clone and writes nothing, so ``snakemake -n`` and ``--lint`` leave
the tree as it was: it checks the epoch ledger
``results/<campaign>/epochs.json`` (``kgate.epochs.check``), refusing a
contract changed after a freeze without ``new_epoch=true`` before any job.

``open_epoch`` writes the ledger (``kgate.epochs.open_or_check``: on the first
run, and when the contract changed before a freeze or with
``new_epoch=true``, which also archives the records). The Snakefile calls it
from its ``onstart`` handler (workflow/rules/common.smk), which Snakemake 9
calls in the main process once the DAG is built and before the first job,
only when jobs will run: not for a dry run, ``--lint``, ``--dag`` or a DAG
with nothing to do, and not inside a job (spawned jobs get ``--no-hooks``).
Why not a job: no one rule runs first whenever the ledger changes (doctor and
target rerun only for their own inputs; a threshold changed with
``new_epoch=true`` reruns only the stage it judges), and every stage's record
needs the new epoch. Limit: under ``--no-hooks`` the ledger is not written, so
a stage in a changed contract refuses to run (``kgate.epochs.current``).

``resolve`` also checks that every ``gate.tests`` path is in a git target's baseline
commit (``gate_tests_at_baseline``), and reads every record the run's walk would read that exists: a
truncated or corrupt one (or the ledger) is one line naming its path, before
the DAG is built. Snakemake's lock files are made safe for lanes by
``kgate.locks`` (installed by workflow/rules/common.smk).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kgate import campaign_checks, device, epochs, paths, protocol
from kgate.campaign import Campaign, validate
from kgate.errors import ConfigError, IncompleteData
from kgate.records import read_record
from kgate.source import candidate, git


@dataclass(frozen=True, slots=True)
class Run:
    """One invocation's campaign, device class and candidate id."""

    campaign: Campaign
    gpu: str
    candidate: str
    force: bool
    config: dict[str, Any]
    #: the epoch the run is in, as ``kgate.epochs.check`` found it at DAG build (written by ``open_epoch``)
    epoch: dict[str, Any]
    new_epoch: bool = False

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
    """The validated config, the campaign, the device class and the candidate; the epoch is checked, not written."""
    cfg = {k: v for k, v in config.items()}
    validate(cfg, "config", "config")
    camp = campaign_checks.load(cfg["campaign"], {"target_path": cfg.get("target_path"),
                                                "candidate": cfg.get("candidate")})
    gpu = cfg.get("gpu", "auto")
    if gpu == "auto":
        gpu = device.detect().klass
    why = (camp.data.get("gate") or {}).get("cpu_unavailable")
    if gpu == "cpu" and why:
        raise ConfigError(f"{camp.path}: key 'gate.cpu_unavailable': campaign {camp.name} does not run on CPU: {why}")
    new_epoch = _flag(cfg.get("new_epoch", False))
    epoch = epochs.check(camp, new_epoch).epoch
    gate_tests_at_baseline(camp)
    cand = candidate.identity(camp)
    check_records(camp.name, gpu, cand)
    return Run(campaign=camp, gpu=gpu, candidate=cand, force=_flag(cfg.get("force", False)),
               config=cfg, epoch=epoch, new_epoch=new_epoch)


def gate_tests_at_baseline(camp: Campaign) -> None:
    """Every ``gate.tests`` path (a node id's file) is in the baseline commit of a ``repo`` target whose clone
    is there and holds that commit; else baseline_tests would find nothing to collect (or run less than named).
    A missing clone or commit is left to the target stage, which says so; a pypi target's tree is its sdist,
    unpacked only by that stage."""
    if camp.target_kind != "repo" or not camp.repo_path.is_dir():
        return
    entries = list(dict.fromkeys(t.split("::")[0] for t in camp.data["gate"]["tests"]))
    sha = camp.data["target"]["repo"]["baseline"]
    missing = git.missing_paths(camp.repo_path, sha, entries)
    if missing:
        raise ConfigError(f"{camp.path}: key 'gate.tests': {missing} not in the baseline {sha[:12]} of "
                          f"{camp.repo_path}: baseline_tests would have nothing there to collect")


def check_records(campaign: str, gpu: str, cand: str) -> None:
    """Every stage record of this run that exists must be readable (``kgate.records.read_record``): a truncated
    or corrupt one is an ``IncompleteData`` naming its path, before the DAG is built."""
    for stage in protocol.STAGES:
        path = paths.record(campaign, gpu, stage, cand if stage in protocol.CANDIDATE_STAGES else None)
        if path.exists():
            try:
                read_record(path)
            except IncompleteData as exc:
                raise IncompleteData(f"{exc}; remove it to run its stage again") from exc


def open_epoch(run: Run) -> dict[str, Any]:
    """Write the epoch ledger for ``run`` (``kgate.epochs.open_or_check``); returns the current epoch."""
    return epochs.open_or_check(run.campaign, run.new_epoch)


def _flag(value: bool | str) -> bool:
    """A boolean config value given as YAML or on the command line (``--config force=true``)."""
    return value if isinstance(value, bool) else value.lower() == "true"


def status(path: str | Path) -> str:
    """Status of a finished record (read by the report's input function)."""
    return read_record(path)["status"]


def force_flag(forced: bool, inputs: list[str]) -> str:
    """A forced stage's ``--force``: given only when one of its input records does not let it through unforced
    (``protocol.lets_through``), or is not there yet.

    The measuring rules compute it from the job's inputs (``force`` in workflow/rules/common.smk). Snakemake
    leaves a param derived from input files out of its params-changed rerun trigger, so turning ``force=true``
    on or off never reruns a finished stage by itself: added after a run that ended at an INCONCLUSIVE or a
    STOP, it runs only the stages past that record. (As a plain param of every measuring rule it re-measured
    profile_candidate and rewrote bench's record in that case.) A stage that ran without ``--force`` records
    ``forced: false``, which is what it was. Limit: metadata that an older kgate wrote with the plain param
    makes Snakemake rerun those stages once.
    """
    if not forced:
        return ""
    for path in inputs:
        if not Path(path).exists():
            return "--force"
        rec = read_record(path)
        if not protocol.lets_through(rec["stage"], rec["status"], False):
            return "--force"
    return ""
