# Stage 10 of kgate.protocol.STAGES, model: training throughput of the campaign's end-to-end workload (dense,
# and packed varlen where the model takes boundaries), both arms on one GPU in this one job, blocks of steps
# alternating AB, BA, ...; blocks checkpoint to blocks.jsonl beside the record. Gates on bench
# (protocol.GATING_INPUTS), not on ncu. The model settings are checked at DAG build (kgate.campaign_checks).


checkpoint model:
    input:
        fixture="results/{campaign}/{gpu}/fixture_freeze/record.json",
        profile="results/{campaign}/{gpu}/profile_baseline/record.json",
        build="results/{campaign}/{gpu}/candidate_build/{cand}/record.json",
        gate="results/{campaign}/{gpu}/candidate_gate/{cand}/record.json",
        pair="results/{campaign}/{gpu}/profile_candidate/{cand}/record.json",
        bench="results/{campaign}/{gpu}/bench/{cand}/record.json",
    output:
        record="results/{campaign}/{gpu}/model/{cand}/record.json",
    log:
        "logs/{campaign}/{gpu}/model/{cand}/record.log",
    params:
        campaign_file=CAMPAIGN_FILE,
        overrides=OVERRIDES,
        contract=RUN.campaign.section_hash("model"),
        sdist_cache=RUN.config.get("sdist_cache", "work/cache/sdists"),
        force=force,
    resources:
        gpu=1,
    shell:
        """
        python -m kgate model \
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
            --sdist-cache {params.sdist_cache:q} \
            --runtime-min {resources.runtime} \
            {params.force} \
            {params.overrides:q} \
            > {log:q} 2>&1
        """
