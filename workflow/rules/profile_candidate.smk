# Stage 7 of kgate.protocol.STAGES, profile_candidate: the pair table on the candidate (same harness, both arms
# in one job); STOP on spills, occupancy collapse or pair speedups that cannot carry the bar; a hidden
# replacement kernel fails.
checkpoint profile_candidate:
    input:
        fixture="results/{campaign}/{gpu}/fixture_freeze/record.json",
        profile="results/{campaign}/{gpu}/profile_baseline/record.json",
        build="results/{campaign}/{gpu}/candidate_build/{cand}/record.json",
        gate="results/{campaign}/{gpu}/candidate_gate/{cand}/record.json",
    output:
        record="results/{campaign}/{gpu}/profile_candidate/{cand}/record.json",
    log:
        "logs/{campaign}/{gpu}/profile_candidate/{cand}/record.log",
    params:
        campaign_file=CAMPAIGN_FILE,
        overrides=OVERRIDES,
        contract=RUN.campaign.section_hash("measure", "profile"),
        inputs=measure_inputs,
        force=force,
    resources:
        gpu=1,
    shell:
        """
        python -m kgate profile_candidate \
            --campaign-file {params.campaign_file:q} \
            --gpu {wildcards.gpu:q} \
            --candidate {wildcards.cand:q} \
            --record {output.record:q} \
            --kernel-cache {resources.kernel_cache:q} \
            --input-record {input.fixture:q} \
            --input-record {input.profile:q} \
            --input-record {input.build:q} \
            --input-record {input.gate:q} \
            --runtime-min {resources.runtime} \
            --test-timeout-s {resources.test_timeout_s} \
            --workers {resources.test_workers} \
            {params.force} \
            {params.overrides:q} \
            > {log:q} 2>&1
        """
