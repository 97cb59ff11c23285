# Stage 2 of kgate.protocol.STAGES, baseline_tests: the untouched gate at the exact baseline; deterministic
# failures are a terminal NO-GO.
checkpoint baseline_tests:
    input:
        target="results/{campaign}/{gpu}/target/record.json",
    output:
        record="results/{campaign}/{gpu}/baseline_tests/record.json",
    log:
        "logs/{campaign}/{gpu}/baseline_tests/record.log",
    params:
        campaign_file=CAMPAIGN_FILE,
        overrides=BASE_OVERRIDES,
        contract=RUN.campaign.section_hash("target", "gate"),
    resources:
        gpu=1,
    shell:
        """
        python -m kgate baseline_tests \
            --campaign-file {params.campaign_file:q} \
            --gpu {wildcards.gpu:q} \
            --record {output.record:q} \
            --kernel-cache {resources.kernel_cache:q} \
            --input-record {input.target:q} \
            --runtime-min {resources.runtime} \
            --test-timeout-s {resources.test_timeout_s} \
            --workers {resources.test_workers} \
            {params.overrides:q} \
            > {log:q} 2>&1
        """
