"""Where things live: every path says what made it.

results/<campaign>/<gpu>/<stage>/[<candidate>/]record.json
logs/<campaign>/<gpu>/<stage>/[<candidate>/]record.log      (mirrors results)
work/<campaign>/<gpu>/                                      kgate's clone, worktrees, caches
reports/<campaign>/<gpu>/                                    the rendered report
results/<campaign>/epochs.json, results/<campaign>/_epochs/  the epoch ledger and its archives
work/cache/packages/                                         unpacked PyPI sdists, shared by campaigns
work/init/<campaign>/                                        kgate init's clone and worktrees of a change
work/cache/kernels/<stack>/                                  the kernel cache of one device class and software
                                                             stack, shared by campaigns, stages and arms (the
                                                             default of --kernel-cache; a profile setting)

These run paths are relative to the Snakemake workdir (the kgate checkout).
Two folders are absolute: ``PACKAGE`` (the installed package and the data it
ships: schemas, ncu metric map, pytest ini, templates) and ``PROJECT`` (the
checkout holding config/campaigns/, kernels/ and scripts/, against which
campaign files resolve their overlays, CPU setups and gate suites).
"""

from __future__ import annotations

from pathlib import Path

from kgate.protocol import CANDIDATE_STAGES

#: The kgate package itself, wherever it is installed; its data files (ncu metric map, pytest ini, report
#: templates, schemas) ship inside it. ``PACKAGE.parent`` is the folder that holds it, put on the PYTHONPATH of processes that
#: load kgate's pytest plugins or workers inside a target's worktree.
PACKAGE = Path(__file__).resolve().parent
DATA = PACKAGE / "data"
TEMPLATES = PACKAGE / "report" / "templates"
#: the JSON schemas (YAML) of campaign files, the workflow config and overlay folders, shipped as package data
SCHEMAS = PACKAGE / "schemas"
#: The kgate checkout: the folder holding the package, config/campaigns/, kernels/ and scripts/. Campaign names
#: and the kgate-relative paths in campaign files (overlays, CPU setups, gate suites, inputs) resolve against it.
#: Only a checkout (run in place or installed with ``pip install -e .``) has these folders beside the package. A
#: wheel install ships the package alone: PROJECT is then the folder it is installed in (site-packages), so
#: named campaigns and relative campaign paths do not resolve there; ``--help``, doctor and the schemas work.
PROJECT = PACKAGE.parent
CAMPAIGNS = PROJECT / "config" / "campaigns"
#: PyPI sdists unpacked once per sha256 (``kgate.source.packages``), relative to the workdir
PACKAGE_CACHE = Path("work") / "cache" / "packages"
#: the default root of the kernel caches (``--kernel-cache``, the profiles' ``kernel_cache``), relative to the workdir
KERNEL_CACHE = Path("work") / "cache" / "kernels"


def schema(name: str) -> Path:
    """The schema file ``<name>.schema.yaml`` (campaign, config, overlay)."""
    return SCHEMAS / f"{name}.schema.yaml"


def campaign_results(campaign: str) -> Path:
    """results/<campaign>/: every device class's results, the epoch ledger and its archives."""
    return Path("results") / campaign


def results(campaign: str, gpu: str) -> Path:
    """results/<campaign>/<gpu>/: the records of one campaign on one device class."""
    return campaign_results(campaign) / gpu


def logs(campaign: str, gpu: str) -> Path:
    """logs/<campaign>/<gpu>/: the stage logs, mirroring :func:`results`."""
    return Path("logs") / campaign / gpu


def epochs_ledger(campaign: str) -> Path:
    """results/<campaign>/epochs.json (``kgate.epochs``)."""
    return campaign_results(campaign) / "epochs.json"


def epoch_archive(campaign: str, number: int) -> Path:
    """results/<campaign>/_epochs/<number>/: the records of a closed epoch."""
    return campaign_results(campaign) / "_epochs" / str(number)


def stage_root(campaign: str, gpu: str, stage: str) -> Path:
    """results/<campaign>/<gpu>/<stage>/: a stage's folder; a candidate stage keeps one folder per candidate in it."""
    return results(campaign, gpu) / stage


def stage_dir(campaign: str, gpu: str, stage: str, candidate: str | None = None) -> Path:
    base = stage_root(campaign, gpu, stage)
    if stage in CANDIDATE_STAGES:
        if not candidate:
            raise ValueError(f"stage {stage} needs a candidate id")
        return base / candidate
    return base


def record(campaign: str, gpu: str, stage: str, candidate: str | None = None) -> Path:
    return stage_dir(campaign, gpu, stage, candidate) / "record.json"


#: the per-round checkpoint file a measuring stage appends beside its record (kgate.measure.checkpoints)
CHECKPOINTS = {"bench": "rounds.jsonl", "model": "blocks.jsonl"}


def checkpoint_beside(record_path: Path, stage: str) -> Path:
    """The checkpoint (``CHECKPOINTS[stage]``) in the folder of a record of ``stage``, wherever that record lies."""
    return Path(record_path).parent / CHECKPOINTS[stage]


def log(campaign: str, gpu: str, stage: str, candidate: str | None = None) -> Path:
    return Path("logs") / stage_dir(campaign, gpu, stage, candidate).relative_to("results") / "record.log"


def work(campaign: str, gpu: str) -> Path:
    return Path("work") / campaign / gpu


def repo(campaign: str, gpu: str) -> Path:
    """kgate's own bare clone of the target (the user's clone is never written)."""
    return work(campaign, gpu) / "target.git"


def worktree(campaign: str, gpu: str, arm: str) -> Path:
    return work(campaign, gpu) / "wt" / arm


def candidate_arm(candidate: str) -> str:
    """The arm name of a candidate: its worktree ``wt/cand-<id>`` and its branch ``kgate/<campaign>/cand-<id>``."""
    return f"cand-{candidate}"


def stack_cache(root: Path, stack_id: str) -> Path:
    """<root>/<stack id>/: the kernel cache of one device class and software stack (``kgate.cache``), shared by
    every campaign, stage and arm that runs on that stack."""
    return Path(root) / stack_id


def triton_cache(root: Path, stack_id: str) -> Path:
    """<root>/<stack id>/triton/: ``TRITON_CACHE_DIR`` of every stage and arm on the stack. Triton keys
    compiled kernels and autotune results by kernel source and options, so sharing cannot mix arms
    (docs/cache.md states what the key holds and what it does not)."""
    return stack_cache(root, stack_id) / "triton"


def target_cache(root: Path, stack_id: str, variable: str) -> Path:
    """<root>/<stack id>/target/<VARIABLE>/: the folder a campaign's ``cache.target_env`` variable points at."""
    return stack_cache(root, stack_id) / "target" / variable


def stack_manifest(root: Path, stack_id: str) -> Path:
    """<root>/<stack id>/stack.json: the facts of the stack the folder belongs to."""
    return stack_cache(root, stack_id) / "stack.json"


def imported_ledger(root: Path, stack_id: str) -> Path:
    """<root>/<stack id>/imported.json: the entries ``kgate cache import`` brought (what makes a cache 'seeded')."""
    return stack_cache(root, stack_id) / "imported.json"


def init_work(root: Path, campaign: str) -> Path:
    """<root>/work/init/<campaign>/: ``kgate init``'s own bare clone of the target and its two worktrees
    (base and head), where it reads the change, runs the target's helpers and collects the gate."""
    return Path(root) / "work" / "init" / campaign


def report_dir(campaign: str, gpu: str) -> Path:
    return Path("reports") / campaign / gpu


def verdict_file(campaign: str, gpu: str) -> Path:
    """reports/<campaign>/<gpu>/verdict.json, the report's verdict (``kgate verdict --check``)."""
    return report_dir(campaign, gpu) / "verdict.json"


def branch(campaign: str, arm: str) -> str:
    return f"kgate/{campaign}/{arm}"
