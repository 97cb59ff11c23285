# Validation, identities and paths for one run; the report's input function is the gate walk.
import sys

from kgate import paths
from kgate.errors import KgateError
from kgate.workflow import resolve, status

try:
    RUN = resolve(config)
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
    return str(paths.record(C, G, stage, cand if stage in paths.CANDIDATE_STAGES else None))


def log_of(stage, cand=None):
    return str(paths.log(C, G, stage, cand if stage in paths.CANDIDATE_STAGES else None))


def gated_records(wildcards):
    """Walk the stages in order; stop at the first record that did not pass.

    Each stage is a checkpoint, so its status is known before the next stage
    is asked for: no job is ever scheduled past a failed gate. A forced run
    (config force=true) walks on past a 'stop'; the verdict stays STOPPED.
    """
    out = []
    for stage in paths.STAGES:
        kw = {"campaign": C, "gpu": G}
        if stage in paths.CANDIDATE_STAGES:
            kw["cand"] = H
        getattr(checkpoints, stage).get(**kw)
        path = rec(stage, H)
        out.append(path)
        st = status(path)
        if st != "pass" and not (st == "stop" and RUN.force):
            break
    return out
