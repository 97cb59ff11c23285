"""Site checks: what the preflight (``python -m kgate doctor``, ``kgate.stages.doctor``) asks of this node
and its Slurm cluster.

``common`` (the check result, the command runner, the site's facts, profile
reading), ``files`` (target clone, kgate's folders), ``cluster`` (Slurm
partition, GPU model, status polling, compute node) and ``node`` (device class,
ncu, PyTorch/Triton for the GPU's architecture). A layer below the stages: it
imports no stage; the doctor stage orders the checks and writes the record.
"""
