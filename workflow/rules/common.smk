# Validation, identities and paths for one run; the report's input function is the gate walk.
import sys

from kgate import locks, paths, protocol
from kgate.errors import KgateError
from kgate.measure.rows import inputs_fingerprint
from kgate.protocol import gated_walk
from kgate.source import overlay
from kgate.workflow import force_flag, open_epoch, resolve, status

# Snakemake's lock files, lane-safe (kgate.locks): a run removes only its own locks, checks and writes them under
# one mutex, and holds each for its life, so a killed run's locks are known dead and removed by the next run.
try:
    locks.install()
except KgateError as exc:
    sys.exit(f"kgate: error: {exc}")

# The DAG build only reads (a changed contract after a freeze is refused here); dry runs and --lint write nothing.
try:
    RUN = resolve(config)
except KgateError as exc:
    sys.exit(f"kgate: error: {exc}")


# The epoch ledger is written when jobs are about to run: Snakemake calls onstart in the main process, before the
# first job, never for -n, --lint or a DAG with nothing to do, nor inside jobs (kgate.workflow.open_epoch).
onstart:
    try:
        open_epoch(RUN)
    except KgateError as exc:
        sys.exit(f"kgate: error: {exc}")

C = RUN.name
G = RUN.gpu
H = RUN.candidate
CAMPAIGN_FILE = str(RUN.campaign.path)
OVERRIDES = RUN.cli_overrides()
BASE_OVERRIDES = RUN.cli_overrides(candidate=False)
REPORT = [str(paths.report_dir(C, G) / "index.html"), f"results/{C}/{G}/report/{H}/verdict.json"]

wildcard_constraints:
    campaign=r"[a-z0-9][a-z0-9-]*",
    gpu=r"[a-z0-9]+",
    cand=r"[0-9a-f]{12}",


def rec(stage, cand=None):
    """Record path of a stage (candidate stages keyed by the candidate id)."""
    return str(paths.record(C, G, stage, cand if stage in protocol.CANDIDATE_STAGES else None))


def log_of(stage, cand=None):
    return str(paths.log(C, G, stage, cand if stage in protocol.CANDIDATE_STAGES else None))


# params computed when a job is scheduled (a changed value reruns the rule)


def measure_inputs(wildcards):
    """sha256 of the campaign's input generator: the timed stages' `inputs` param."""
    return inputs_fingerprint(RUN.campaign)


def fixture_hash(wildcards):
    """Content hash of the fixture overlay variant this target selects: fixture_freeze's `fixture` param."""
    return overlay.content_hash(RUN.campaign.data["fixture"]["overlay"], RUN.campaign.target_identity)


def force(wildcards, input):
    """The measuring stages' `force` param: `--force` when a forced run's input records need it
    (kgate.workflow.force_flag). Derived from the input files, it is outside Snakemake's params-changed trigger,
    so adding force=true reruns no stage whose inputs passed."""
    return force_flag(RUN.force, list(input))


def gated_records(wildcards):
    """The records the report needs: kgate.protocol.gated_walk over the stage checkpoints.

    Each stage is a checkpoint, so its status is known before the next stage
    is asked for. A stage is asked for only when its gating inputs
    (protocol.GATING_INPUTS) passed; an `unavailable` record (e.g. ncu on CPU)
    blocks only the stages that gate on it; a failed gate ends the walk, so no
    job is ever scheduled past a failed gate. A forced run (config force=true)
    walks on past a 'stop'; the verdict stays STOPPED.
    """

    def status_of(stage):
        kw = {"campaign": C, "gpu": G}
        if stage in protocol.CANDIDATE_STAGES:
            kw["cand"] = H
        getattr(checkpoints, stage).get(**kw)
        return status(rec(stage, H))

    return [rec(stage, H) for stage in gated_walk(status_of, RUN.force)]
