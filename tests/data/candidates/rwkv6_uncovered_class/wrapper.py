

# Test candidate: claims a new dispatch class (D up to 512) without a fixture case for it.
_kgate_test_original_bwd = chunk_rwkv6_bwd


def chunk_rwkv6_bwd(*args, **kwargs):
    return _kgate_test_original_bwd(*args, **kwargs)
