# Preflight, the DAG's first rule: the site checks of `python -m kgate doctor`, run as a job with the GPU
# stages' resources, so it checks what they will see (target clone, caches, device class, ncu, Triton for this
# GPU's arch; the job's partition under Slurm). A failure is an error naming every failed check: no record,
# and no stage runs. `target` takes the record as ancient(): a preflight run again over an existing
# record (--forcerun doctor) that passes reruns no finished stage.
rule doctor:
    output:
        record="results/{campaign}/{gpu}/doctor/record.json",
    log:
        "logs/{campaign}/{gpu}/doctor/record.log",
    params:
        campaign_file=CAMPAIGN_FILE,
        overrides=BASE_OVERRIDES,
    resources:
        gpu=1,
        runtime=10,
    shell:
        """
        python -m kgate doctor \
            --record {output.record:q} \
            --campaign-file {params.campaign_file:q} \
            --gpu {wildcards.gpu:q} \
            {params.overrides:q} \
            > {log:q} 2>&1
        """
