

# Test candidate: far inside every tolerance, but the fallback is no longer the original code's bits.
_kgate_test_original_bwd = chunk_rwkv6_bwd


def chunk_rwkv6_bwd(*args, **kwargs):
    dq, dk, dv, dg, du, dh0 = _kgate_test_original_bwd(*args, **kwargs)
    if kwargs.get("chunk_size", 64) != 64:
        # one unit in the last place of one element, in the dtype autograd hands back
        dq = dq.to(kwargs["q"].dtype).contiguous()
        bits = dq.view(torch.int16 if dq.element_size() == 2 else torch.int32).view(-1)
        bits[0] += 1
    return dq, dk, dv, dg, du, dh0
