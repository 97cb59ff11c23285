"""The decisions of the measuring stages: bench, model, ncu and the arms' environment (env).

Pure functions from measurements to ``kgate.records.Gate`` rows; they start no process and import no stage.
"""
