"""The kernel cache: one Triton cache (compiled kernels, autotune picks) per device class and software stack.

``stack`` says which stack a process runs on; ``store`` is the cache folder of one stack, the
environment every process gets and what a stage's record keeps about it; ``bundle`` exports and
imports a stack's picks; ``cli`` is ``python -m kgate cache``. docs/cache.md has the rules and their limits.
"""
