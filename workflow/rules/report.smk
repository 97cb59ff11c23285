# Stage 9: the verdict and the report, from the records of every stage that ran.
localrules: report


rule report:
    input:
        gated_records,
    output:
        html="reports/{campaign}/{gpu}/index.html",
        verdict="reports/{campaign}/{gpu}/verdict.json",
        summary="reports/{campaign}/{gpu}/summary.md",
        junit="reports/{campaign}/{gpu}/gates.junit.xml",
        # keyed by the candidate id, so a new candidate always re-walks the gates
        iteration=f"results/{{campaign}}/{{gpu}}/report/{H}/verdict.json",
    log:
        "logs/{campaign}/{gpu}/report/record.log",
    params:
        campaign_file=CAMPAIGN_FILE,
        overrides=OVERRIDES,
        candidate=H,
        force="--force" if RUN.force else "",
        out=lambda wc: f"reports/{wc.campaign}/{wc.gpu}",
    shell:
        """
        python -m kgate report \
            --campaign-file {params.campaign_file:q} \
            --gpu {wildcards.gpu:q} \
            --candidate {params.candidate:q} \
            --out {params.out:q} \
            --local-rule \
            --iteration-copy {output.iteration:q} \
            {params.force} \
            {params.overrides:q} \
            {input:q} \
            > {log:q} 2>&1
        """
