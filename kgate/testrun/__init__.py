"""pytest runs of the correctness gates: the runner, rerun judgement, resuming an interrupted run, the guard
that ends a run with its stage, the outcome, Triton-interpreter and numerics plugins loaded into the test
processes, and the numeric-settings watch they (and the timing workers) use. Imports no stage.
"""
