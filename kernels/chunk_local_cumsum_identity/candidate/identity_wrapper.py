

# kgate identity candidate: rebinds the public entry point to a pass-through
# wrapper around the original function. Behaviour is unchanged; the campaign
# uses it to check that kgate's DAG is op-agnostic and that a neutral change
# passes every gate.
_kgate_original_chunk_local_cumsum = chunk_local_cumsum


def chunk_local_cumsum(*args, **kwargs):
    return _kgate_original_chunk_local_cumsum(*args, **kwargs)
