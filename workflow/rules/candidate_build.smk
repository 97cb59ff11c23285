# Stage 5 of kgate.protocol.STAGES, candidate_build: the candidate as one commit on BENCH_BASE; scope, frozen
# files, forbidden patterns, lint.
localrules: candidate_build


checkpoint candidate_build:
    input:
        fixture="results/{campaign}/{gpu}/fixture_freeze/record.json",
    output:
        record="results/{campaign}/{gpu}/candidate_build/{cand}/record.json",
    log:
        "logs/{campaign}/{gpu}/candidate_build/{cand}/record.log",
    params:
        campaign_file=CAMPAIGN_FILE,
        overrides=OVERRIDES,
        contract=RUN.campaign.section_hash("candidate"),
    shell:
        """
        python -m kgate candidate_build \
            --campaign-file {params.campaign_file:q} \
            --gpu {wildcards.gpu:q} \
            --candidate {wildcards.cand:q} \
            --record {output.record:q} \
            --kernel-cache {resources.kernel_cache:q} \
            --input-record {input.fixture:q} \
            --local-rule \
            {params.overrides:q} \
            > {log:q} 2>&1
        """
