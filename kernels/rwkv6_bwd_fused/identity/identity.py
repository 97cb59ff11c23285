

# kgate identity candidate: the backward host function is rebound to a wrapper
# that calls the original unchanged, so every kernel launch and every bit of
# output is the baseline's. It exercises the candidate path (diff, commit,
# gates) and is the A/A arm of the benchmark.
_kgate_identity_original_bwd = chunk_rwkv6_bwd


def chunk_rwkv6_bwd(*args, **kwargs):
    return _kgate_identity_original_bwd(*args, **kwargs)
