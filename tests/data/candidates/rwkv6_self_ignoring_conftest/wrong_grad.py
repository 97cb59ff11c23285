

# Test candidate: dq 1.5x; only the hidden conftest.py keeps the frozen tests green.
_kgate_test_original_bwd = chunk_rwkv6_bwd


def chunk_rwkv6_bwd(*args, **kwargs):
    dq, dk, dv, dg, du, dh0 = _kgate_test_original_bwd(*args, **kwargs)
    return dq * 1.5, dk, dv, dg, du, dh0
