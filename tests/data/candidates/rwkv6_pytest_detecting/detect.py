

# Test candidate: right where the frozen tests look (pytest is loaded), dq 1.5x on the optimized path
# (chunk size 64) everywhere else: in the timed stages and in candidate_gate's outputs check.
_kgate_test_original_bwd = chunk_rwkv6_bwd


def chunk_rwkv6_bwd(*args, **kwargs):
    import sys

    dq, dk, dv, dg, du, dh0 = _kgate_test_original_bwd(*args, **kwargs)
    if "pytest" not in sys.modules and kwargs.get("chunk_size", 64) == 64:
        dq = dq * 1.5
    return dq, dk, dv, dg, du, dh0
