# kgate: one campaign as a gated DAG. Logic lives in workflow/rules/common.smk and the kgate package.
import os

from snakemake.utils import min_version

min_version("9.0")


configfile: os.path.join(workflow.basedir, "config", "config.yaml")


include: "workflow/rules/common.smk"
include: "workflow/rules/doctor.smk"
include: "workflow/rules/target.smk"
include: "workflow/rules/baseline_tests.smk"
include: "workflow/rules/fixture_freeze.smk"
include: "workflow/rules/profile_baseline.smk"
include: "workflow/rules/candidate_build.smk"
include: "workflow/rules/candidate_gate.smk"
include: "workflow/rules/profile_candidate.smk"
include: "workflow/rules/bench.smk"
include: "workflow/rules/ncu.smk"
include: "workflow/rules/model.smk"
include: "workflow/rules/report.smk"


# The walked records are targets too: a record lost after the report was rendered (an interrupted
# --forcerun, a deleted file) is measured again instead of hidden behind the report's existing files.
rule all:
    input:
        REPORT,
        gated_records,
