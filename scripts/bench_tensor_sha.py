"""Host cost of hashing one large tensor: kgate's streamed sha256 against the former whole-tensor copy.

Usage: python scripts/bench_tensor_sha.py [--mib 2048] [--repeat 3] [--threads N]. Prints one JSON record
(``kgate.bench.tensor-sha/1``): per method the wall seconds of each repeat and the process's peak resident set
growth in bytes, each method run in a fresh child process so one's peak cannot hide the other's. Method: a bf16
CPU tensor of ``--mib`` MiB of seeded values is hashed ``--repeat`` times; with ``--threads N`` also as 8 leaves
(a row's inputs), one at a time and on N threads. Limits: CPU tensors only (a device
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
if method.startswith("leaves_"):
    # the tensor split into 8 leaves (a row's inputs), hashed one at a time or on threads
    parts = list(t.chunk(8))
    threads = 1 if method == "leaves_one_at_a_time" else int(method.rpartition("_")[2])
    fn = lambda x: tensors.combined(dict(enumerate(tensors.hash_leaves(torch, parts, threads))))
else:
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
    ap.add_argument("--threads", type=int, default=0, help="also hash the tensor as 8 leaves, one at a time and "
                    "on this many threads (kgate.measure.tensors.hash_leaves); 0: not")
    a = ap.parse_args()
    out = {"schema": "kgate.bench.tensor-sha/1", "tensor_bytes": a.mib << 20, "dtype": "bfloat16", "methods": {}}
    leaves = ("leaves_one_at_a_time", f"leaves_threads_{a.threads}") if a.threads else ()
    for method in ("whole_copy", "streamed", *leaves):
        res = subprocess.run([sys.executable, "-c", CHILD, method, str(a.mib), str(a.repeat)],
                             capture_output=True, text=True, check=True)
        rec = json.loads(res.stdout.strip().splitlines()[-1])
        rec["median_s"] = statistics.median(rec["wall_s"])
        out["methods"][method] = rec
    digests = {m["digest"] for k, m in out["methods"].items() if not k.startswith("leaves_")}
    out["same_digest"] = len(digests) == 1 and len({m["digest"] for k, m in out["methods"].items()
                                                   if k.startswith("leaves_")}) <= 1
    json.dump(out, sys.stdout, indent=1)
    print()
    if not out["same_digest"]:
        sys.exit("the two methods gave different digests")


if __name__ == "__main__":
    main()
