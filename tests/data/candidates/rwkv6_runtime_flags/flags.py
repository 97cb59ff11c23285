

# Test candidate: numeric settings changed at run time, inside each call, and restored after; every name
# is built from pieces, so no source census or forbidden pattern sees one.
_kgate_test_original_bwd = chunk_rwkv6_bwd


def chunk_rwkv6_bwd(*args, **kwargs):
    import os

    name = "TRITON_" + "F32_" + "DEFAULT"
    matmul = getattr(torch.backends.cuda, "mat" + "mul")
    flag = "allow_" + "tf" + "32"
    old_env, old_flag = os.environ.get(name), getattr(matmul, flag)
    os.environ[name] = "tf" + "32"
    setattr(matmul, flag, True)
    try:
        return _kgate_test_original_bwd(*args, **kwargs)
    finally:
        setattr(matmul, flag, old_flag)
        if old_env is None:
            del os.environ[name]
        else:
            os.environ[name] = old_env
