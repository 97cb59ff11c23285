"""``kgate init``: a campaign from a change (docs/init.md).

change (read the clone) -> split (fixture, candidate, left out) -> gate (tests, frozen, CPU selection) ->
kernels (the mechanism) -> registry or bench_scripts (rows, inputs) -> compose (the campaign's data) -> write (files, checks).
"""
