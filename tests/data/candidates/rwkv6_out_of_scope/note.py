

# out of scope for an RWKV6 campaign
