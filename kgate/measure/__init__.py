"""Timed runs: worker processes per arm (arms, worker), the rows they run (rows), telemetry, checkpoints,
profiles and output comparisons; ``harness/`` holds the model stage's training harness. Imports no stage.
"""
