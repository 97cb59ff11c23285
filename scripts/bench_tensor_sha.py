"""Host cost of hashing one large tensor: kgate's streamed sha256 against the former whole-tensor copy.

Usage: python scripts/bench_tensor_sha.py [--mib 2048] [--repeat 3]. Prints one JSON record
(``kgate.bench.tensor-sha/1``): per method the wall seconds of each repeat and the process's peak resident set
growth in bytes, each method run in a fresh child process so one's peak cannot hide the other's. Method: a bf16
CPU tensor of ``--mib`` MiB of seeded values is hashed ``--repeat`` times. Limits: CPU tensors only (a device
tensor adds a device-to-host copy per chunk, in both methods once); wall times are this machine's.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

CHILD = r"""
import hashlib, json, resource, sys, time
import torch
from kgate.measure import tensors
method, mib, repeat = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
t = torch.empty(mib * (1 << 19), dtype=torch.bfloat16).normal_(generator=torch.Generator().manual_seed(0))
def whole(t):
    h = hashlib.sha256(f"{t.dtype}|{tuple(t.shape)}|".encode())
    h.update(t.detach().contiguous().reshape(-1).cpu().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()
fn = whole if method == "whole_copy" else (lambda x: tensors.tensor_sha(torch, x))
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
walls, digest = [], None
for _ in range(repeat):
    t0 = time.perf_counter(); digest = fn(t); walls.append(time.perf_counter() - t0)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"wall_s": walls, "peak_growth_bytes": peak - before, "digest": digest}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=int, default=2048)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    out = {"schema": "kgate.bench.tensor-sha/1", "tensor_bytes": a.mib << 20, "dtype": "bfloat16", "methods": {}}
    for method in ("whole_copy", "streamed"):
        res = subprocess.run([sys.executable, "-c", CHILD, method, str(a.mib), str(a.repeat)],
                             capture_output=True, text=True, check=True)
        rec = json.loads(res.stdout.strip().splitlines()[-1])
        rec["median_s"] = statistics.median(rec["wall_s"])
        out["methods"][method] = rec
    digests = {m["digest"] for m in out["methods"].values()}
    out["same_digest"] = len(digests) == 1
    json.dump(out, sys.stdout, indent=1)
    print()
    if not out["same_digest"]:
        sys.exit("the two methods gave different digests")


if __name__ == "__main__":
    main()
