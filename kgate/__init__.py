"""kgate: stage gates for GPU-kernel optimization hypotheses.

See docs/architecture.md for the stages, records and verdicts.
"""

__version__ = "0.1.0"
