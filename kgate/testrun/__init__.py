"""pytest runs of the correctness gates: the runner, rerun judgement, resuming an interrupted run, and the
outcome and Triton-interpreter plugins loaded into the test processes. Imports no stage.
"""
