# Stage 8 of kgate.protocol.STAGES, bench: interleaved A/B rounds, both arms on one GPU in this one job; rounds
# checkpoint to rounds.jsonl beside the record, so a killed job resumes at its last finished round.
checkpoint bench:
    input:
        fixture="results/{campaign}/{gpu}/fixture_freeze/record.json",
        profile="results/{campaign}/{gpu}/profile_baseline/record.json",
        build="results/{campaign}/{gpu}/candidate_build/{cand}/record.json",
        gate="results/{campaign}/{gpu}/candidate_gate/{cand}/record.json",
        pair="results/{campaign}/{gpu}/profile_candidate/{cand}/record.json",
    output:
        record="results/{campaign}/{gpu}/bench/{cand}/record.json",
    log:
        "logs/{campaign}/{gpu}/bench/{cand}/record.log",
    params:
        campaign_file=CAMPAIGN_FILE,
        overrides=OVERRIDES,
        contract=RUN.campaign.section_hash("measure", "bench"),
        inputs=measure_inputs,
        force=force,
    resources:
        gpu=1,
    shell:
        """
        python -m kgate bench \
            --campaign-file {params.campaign_file:q} \
            --gpu {wildcards.gpu:q} \
            --candidate {wildcards.cand:q} \
            --record {output.record:q} \
            --kernel-cache {resources.kernel_cache:q} \
            --input-record {input.fixture:q} \
            --input-record {input.profile:q} \
            --input-record {input.build:q} \
            --input-record {input.gate:q} \
            --input-record {input.pair:q} \
            --runtime-min {resources.runtime} \
            --test-timeout-s {resources.test_timeout_s} \
            --workers {resources.test_workers} \
            {params.force} \
            {params.overrides:q} \
            > {log:q} 2>&1
        """
