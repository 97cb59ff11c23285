"""Nsight Compute: where ncu is (lookup), the profiled one-shot process (target), the CSV exports (export)
and their parser (parse). Imports no stage.
"""
