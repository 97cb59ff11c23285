"""CPU only (campaign data of liger-tvd-fused-scale-1127; ``gate.cpu_setup``, never loaded on a GPU).

Liger's ``test/transformers/test_tvd.py`` decides at collection whether its V = 128256 case fits the device,
through ``getattr(torch, infer_device()).get_device_properties(0).total_memory``; ``torch.cpu`` has no such
function, so on CPU the whole file fails to collect. This gives ``torch.cpu`` one that reports 0 bytes: the
large case is skipped on CPU (the interpreter could not run it in the stage's time anyway) and every other case
runs. Nothing else changes.
"""

import types

import torch

if not hasattr(torch.cpu, "get_device_properties"):
    torch.cpu.get_device_properties = lambda _index=0: types.SimpleNamespace(total_memory=0, name="cpu")
