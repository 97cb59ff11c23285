# Stage 4 of kgate.protocol.STAGES, profile_baseline: profile BENCH_BASE; STOP when removing what the hypothesis
# removes cannot reach the bar.
checkpoint profile_baseline:
    input:
        fixture="results/{campaign}/{gpu}/fixture_freeze/record.json",
    output:
        record="results/{campaign}/{gpu}/profile_baseline/record.json",
    log:
        "logs/{campaign}/{gpu}/profile_baseline/record.log",
    params:
        campaign_file=CAMPAIGN_FILE,
        overrides=BASE_OVERRIDES,
        contract=RUN.campaign.section_hash("measure", "profile"),
        inputs=measure_inputs,
    resources:
        gpu=1,
    shell:
        """
        python -m kgate profile_baseline \
            --campaign-file {params.campaign_file:q} \
            --gpu {wildcards.gpu:q} \
            --record {output.record:q} \
            --kernel-cache {resources.kernel_cache:q} \
            --input-record {input.fixture:q} \
            --runtime-min {resources.runtime} \
            --test-timeout-s {resources.test_timeout_s} \
            --workers {resources.test_workers} \
            {params.overrides:q} \
            > {log:q} 2>&1
        """
