# Stage 3 of kgate.protocol.STAGES, fixture_freeze: test-only fixture committed as BENCH_BASE, full gate green,
# frozen manifest written.
checkpoint fixture_freeze:
    input:
        target="results/{campaign}/{gpu}/target/record.json",
        baseline="results/{campaign}/{gpu}/baseline_tests/record.json",
    output:
        record="results/{campaign}/{gpu}/fixture_freeze/record.json",
    log:
        "logs/{campaign}/{gpu}/fixture_freeze/record.log",
    params:
        campaign_file=CAMPAIGN_FILE,
        overrides=BASE_OVERRIDES,
        contract=RUN.campaign.section_hash("target", "gate", "fixture", "frozen"),
        fixture=fixture_hash,
    resources:
        gpu=1,
    shell:
        """
        python -m kgate fixture_freeze \
            --campaign-file {params.campaign_file:q} \
            --gpu {wildcards.gpu:q} \
            --record {output.record:q} \
            --kernel-cache {resources.kernel_cache:q} \
            --input-record {input.target:q} \
            --input-record {input.baseline:q} \
            --runtime-min {resources.runtime} \
            --test-timeout-s {resources.test_timeout_s} \
            --workers {resources.test_workers} \
            {params.overrides:q} \
            > {log:q} 2>&1
        """
