# Stage 6 of kgate.protocol.STAGES, candidate_gate: the full frozen gate (plus dependent tests) on the candidate;
# any failure is a NO-GO.
checkpoint candidate_gate:
    input:
        fixture="results/{campaign}/{gpu}/fixture_freeze/record.json",
        build="results/{campaign}/{gpu}/candidate_build/{cand}/record.json",
    output:
        record="results/{campaign}/{gpu}/candidate_gate/{cand}/record.json",
    log:
        "logs/{campaign}/{gpu}/candidate_gate/{cand}/record.log",
    params:
        campaign_file=CAMPAIGN_FILE,
        overrides=OVERRIDES,
    resources:
        gpu=1,
    shell:
        """
        python -m kgate candidate_gate \
            --campaign-file {params.campaign_file:q} \
            --gpu {wildcards.gpu:q} \
            --candidate {wildcards.cand:q} \
            --record {output.record:q} \
            --kernel-cache {resources.kernel_cache:q} \
            --input-record {input.fixture:q} \
            --input-record {input.build:q} \
            --runtime-min {resources.runtime} \
            --test-timeout-s {resources.test_timeout_s} \
            --workers {resources.test_workers} \
            {params.overrides:q} \
            > {log:q} 2>&1
        """
