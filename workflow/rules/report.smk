# Last, report (not a stage of kgate.protocol.STAGES): the verdict and the report, from the records of every
# stage that ran.
localrules: report


rule report:
    input:
        gated_records,
    output:
        # also artefacts of Snakemake's own `snakemake --report`, which then carries kgate's report
        html=report(
            "reports/{campaign}/{gpu}/index.html",
            caption="../report/index.rst",
            category="kgate",
            subcategory="{campaign} on {gpu}",
            labels={"campaign": "{campaign}", "device": "{gpu}", "file": "index.html"},
        ),
        verdict=report(
            "reports/{campaign}/{gpu}/verdict.json",
            caption="../report/verdict.rst",
            category="kgate",
            subcategory="{campaign} on {gpu}",
            labels={"campaign": "{campaign}", "device": "{gpu}", "file": "verdict.json"},
        ),
        summary=report(
            "reports/{campaign}/{gpu}/summary.md",
            caption="../report/summary.rst",
            category="kgate",
            subcategory="{campaign} on {gpu}",
            labels={"campaign": "{campaign}", "device": "{gpu}", "file": "summary.md"},
        ),
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
