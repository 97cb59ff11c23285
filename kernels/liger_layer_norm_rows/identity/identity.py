

# kgate identity candidate: the backward host function is rebound to a wrapper
# that calls the original unchanged (LigerLayerNormFunction.backward looks the
# name up at call time), so every kernel launch and every bit of output is the
# baseline's. It is the A/A arm of the benchmark.
_kgate_identity_original_bwd = layer_norm_backward


def layer_norm_backward(*args, **kwargs):
    return _kgate_identity_original_bwd(*args, **kwargs)
