# Stage 9 of kgate.protocol.STAGES, ncu: Nsight Compute, both protocol passes on both arms for the campaign's ncu
# rows (one GPU, one job); raw .ncu-rep reports and their CSV exports stay beside the record. `unavailable` on
# CPU or without counters.
checkpoint ncu:
    input:
        fixture="results/{campaign}/{gpu}/fixture_freeze/record.json",
        profile="results/{campaign}/{gpu}/profile_baseline/record.json",
        build="results/{campaign}/{gpu}/candidate_build/{cand}/record.json",
        gate="results/{campaign}/{gpu}/candidate_gate/{cand}/record.json",
        pair="results/{campaign}/{gpu}/profile_candidate/{cand}/record.json",
        bench="results/{campaign}/{gpu}/bench/{cand}/record.json",
    output:
        record="results/{campaign}/{gpu}/ncu/{cand}/record.json",
    log:
        "logs/{campaign}/{gpu}/ncu/{cand}/record.log",
    params:
        campaign_file=CAMPAIGN_FILE,
        overrides=OVERRIDES,
        contract=RUN.campaign.section_hash("measure", "ncu"),
        inputs=measure_inputs,
        force=force,
    resources:
        gpu=1,
    shell:
        """
        python -m kgate ncu \
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
            --input-record {input.bench:q} \
            --runtime-min {resources.runtime} \
            {params.force} \
            {params.overrides:q} \
            > {log:q} 2>&1
        """
