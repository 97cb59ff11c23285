# Preflight (kgate.protocol.PREFLIGHT), doctor, the DAG's first rule: the site checks of `python -m kgate
# doctor`, run as a job with the GPU stages' resources, so it checks what they will see (target clone, caches,
# device class, ncu, Triton for this GPU's arch; the job's partition under Slurm). A failure is an error naming
# every failed check: no record, and no stage runs. `target` takes the record as ancient(): a preflight run again
# over an existing record (--forcerun doctor) that passes reruns no finished stage.
rule doctor:
    output:
        record="results/{campaign}/{gpu}/doctor/record.json",
    log:
        "logs/{campaign}/{gpu}/doctor/record.log",
    # no params: a changed campaign path or target_path must not rerun the preflight ahead of `target`
    # (Snakemake then skips re-evaluating the jobs after it); the shell reads them from common.smk's globals
    resources:
        gpu=1,
        runtime=10,
    shell:
        """
        python -m kgate doctor \
            --record {output.record:q} \
            --kernel-cache {resources.kernel_cache:q} \
            --campaign-file {CAMPAIGN_FILE:q} \
            --gpu {wildcards.gpu:q} \
            {BASE_OVERRIDES:q} \
            > {log:q} 2>&1
        """
