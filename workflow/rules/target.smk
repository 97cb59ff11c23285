# Stage 1 of kgate.protocol.STAGES, target: kgate's own clone of the target at the exact baseline (a PyPI sdist
# is materialized).
localrules: target


checkpoint target:
    input:
        # the preflight ran (workflow/rules/doctor.smk); ancient: a rerun preflight is not newer evidence
        doctor=ancient("results/{campaign}/{gpu}/doctor/record.json"),
    output:
        record="results/{campaign}/{gpu}/target/record.json",
    log:
        "logs/{campaign}/{gpu}/target/record.log",
    params:
        campaign_file=CAMPAIGN_FILE,
        overrides=BASE_OVERRIDES,
        contract=RUN.campaign.section_hash("target"),
        sdist_cache=RUN.config.get("sdist_cache", "work/cache/sdists"),
    shell:
        """
        python -m kgate target \
            --campaign-file {params.campaign_file:q} \
            --gpu {wildcards.gpu:q} \
            --record {output.record:q} \
            --kernel-cache {resources.kernel_cache:q} \
            --sdist-cache {params.sdist_cache:q} \
            --local-rule \
            {params.overrides:q} \
            > {log:q} 2>&1
        """
