

# Test candidate: out of scope twice (a forward redefined, the TileLang backend named), in a diff that
# the candidate's .gitattributes would make binary.
_kgate_test_original_fwd = chunk_rwkv6_fwd


def chunk_rwkv6_fwd(*args, **kwargs):
    import os

    os.environ.get("FLA_TILELANG")
    return _kgate_test_original_fwd(*args, **kwargs)
