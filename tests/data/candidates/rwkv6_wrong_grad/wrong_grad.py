

# Deliberately wrong test candidate: scales dq by 1.01 after the real backward.
_kgate_test_original_bwd = chunk_rwkv6_bwd


def chunk_rwkv6_bwd(*args, **kwargs):
    dq, dk, dv, dg, du, dh0 = _kgate_test_original_bwd(*args, **kwargs)
    return dq * 1.01, dk, dv, dg, du, dh0
