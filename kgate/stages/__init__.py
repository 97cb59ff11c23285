"""One module per stage (``python -m kgate <stage>``, one ``workflow/rules/<stage>.smk`` each), plus doctor
(the preflight), report and common (the stage contract). A stage imports the layers below it and common,
never another stage.
"""
